"""Fixtures of the loadgen tests."""

from __future__ import annotations

import pytest

from loadgen.http import connection as http11


@pytest.fixture(params=["c", "httptools"])
def body_decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both decoders of chunked bodies of the fast transport: the C one
    (``loadgen.http._chunked``, after httptools has read the head; skipped where it is not
    built) and httptools for the whole response. A module runs every test with each by
    ``pytestmark = pytest.mark.usefixtures("body_decoder")``."""
    if request.param == "c":
        if http11._Dechunker is None:
            pytest.skip("loadgen.http._chunked is not built")
    else:
        monkeypatch.setattr(http11, "_Dechunker", None)
    return str(request.param)
