"""Sans-IO response streams: the SSE decoder, ``StreamState`` (the reference) and the feed.

Fed bytes with their arrival stamps, never touches a socket. The C walk (``_sse_scan``)
is optional; without it the feed uses ``StreamState.add``. Imports ``loadgen.openai`` and
orjson only: no httpx, no HTTP stack.
"""

__all__ = [
    "body",
    "feed",
    "responses",
    "sse",
    "state",
    "whole",
]
