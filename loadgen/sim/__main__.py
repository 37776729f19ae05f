"""``python -m loadgen.sim``: the ``loadgen sim`` command without the root CLI.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

from loadgen.sim.cli import sim

if __name__ == "__main__":
    sim(prog_name="python -m loadgen.sim")
