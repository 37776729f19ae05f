from collections.abc import Callable

from loadgen.stream.sse import SSEDecoder
from loadgen.stream.state import StreamState

def scan_read(
    state: StreamState,
    ts: int,
    text: bytes,
    add_block: Callable[[StreamState, int, bytes], None],
    /,
) -> None: ...
def scan_feed(
    decoder: SSEDecoder,
    state: StreamState,
    add_block: Callable[[StreamState, int, bytes], None],
    ts: int,
    data: bytes,
    /,
) -> bool: ...
