"""The report in a real headless browser (Debian's chromium): it renders, logs nothing to
the console (a blocked load would: the page's Content-Security-Policy reports every one as
a console error) and requests nothing from the network; a screenshot is kept in the test's
temporary directory.

The tests use a chromium already on PATH and install nothing by default: without one they
are skipped, saying so. ``LOADGEN_INSTALL_CHROMIUM=1`` asks the ``chromium`` fixture to
install it with apt-get (as root; about 30 s on a Debian 12 machine with a reachable
mirror), and then a failed install fails the tests rather than skipping them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from reports.html.report import write_report
from reports.html.run import ReportOptions

pytestmark = [pytest.mark.slow, pytest.mark.serial]

INSTALL_TIMEOUT_S = 600
BROWSER_TIMEOUT_S = 90


def _find() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="session")
def chromium() -> str:
    """The chromium executable; installed with apt-get only when asked (see the docstring)."""
    found = _find()
    if found:
        return found
    if os.environ.get("LOADGEN_INSTALL_CHROMIUM") != "1":
        pytest.skip(
            "chromium is not installed; LOADGEN_INSTALL_CHROMIUM=1 lets this test install it "
            "with apt-get (as root)"
        )
    # Asked to install: anything that stops it is a failure, not a reason to skip.
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.fail("LOADGEN_INSTALL_CHROMIUM=1, but installing chromium needs root")
    apt = shutil.which("apt-get")
    if apt is None:
        pytest.fail("LOADGEN_INSTALL_CHROMIUM=1, but apt-get is not available")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    started = time.monotonic()
    try:
        for cmd in (
            [apt, "update", "-q"],
            [apt, "install", "-y", "-q", "--no-install-recommends", "chromium"],
        ):
            left = INSTALL_TIMEOUT_S - (time.monotonic() - started)
            subprocess.run(cmd, check=True, capture_output=True, timeout=max(1, left), env=env)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        pytest.fail(f"LOADGEN_INSTALL_CHROMIUM=1, but apt-get could not install chromium: {exc}")
    found = _find()
    if found is None:
        pytest.fail("apt-get installed chromium but no chromium executable is on PATH")
    print(f"installed chromium in {time.monotonic() - started:.1f} s")
    return found


def _run(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        # Nothing resolves: a load that slipped past the policy could not leave the machine.
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--enable-logging=stderr",
        "--v=0",
    ]
    return subprocess.run(
        [chromium, *flags, *args],
        capture_output=True,
        text=True,
        timeout=BROWSER_TIMEOUT_S,
        check=False,
    )


def console_messages(stderr: str) -> list[str]:
    """The page's console messages in chromium's log (``...:CONSOLE:...`` lines)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def test_console_errors_are_detected(chromium: str, tmp_path: Path) -> None:
    """The check below can fail: a page with a network load under our policy logs it."""
    from reports.html.report import CSP

    page = tmp_path / "bad.html"
    page.write_text(
        f'<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" '
        f'content="{CSP}"></head><body><img src="http://example.invalid/x.png"></body></html>'
    )
    result = _run(chromium, tmp_path / "profile", "--dump-dom", page.as_uri())
    assert any("Content Security Policy" in m for m in console_messages(result.stderr))


def test_report_renders_without_console_errors(
    chromium: str, small_run: Path, slower_run: Path, tmp_path: Path
) -> None:
    report = write_report(
        tmp_path / "report.html",
        runs=[small_run, slower_run],
        labels=["a", "b"],
        options=ReportOptions(slo_ttft_ms=30.0),
    )
    dom = _run(chromium, tmp_path / "profile", "--dump-dom", report.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_messages(dom.stderr) == []
    assert "<h2>Comparison</h2>" in dom.stdout
    assert dom.stdout.count("<svg") >= 14, "every chart made it into the rendered DOM"
    shot = tmp_path / "report.png"
    result = _run(
        chromium,
        tmp_path / "profile",
        f"--screenshot={shot}",
        "--window-size=1280,2400",
        report.as_uri(),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_messages(result.stderr) == []
    from PIL import Image

    with Image.open(shot) as image:
        assert image.size == (1280, 2400)
        colours = image.convert("RGB").resize((160, 300)).getcolors(maxcolors=100_000)
        assert colours is not None
        assert len(colours) > 50, "the screenshot is not blank"
