from collections.abc import Callable

from loadgen.protocol import StreamState

def scan_read(
    state: StreamState,
    ts: int,
    text: bytes,
    add_block: Callable[[StreamState, int, bytes], None],
    /,
) -> None: ...
