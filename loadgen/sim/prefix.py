"""Prefix-cache keys: chained hashes of a token sequence's full blocks, as vLLM keys its blocks.

Block ``i`` of a prompt covers tokens ``[i*B, (i+1)*B)``; its key hashes the previous
block's key together with the block's own tokens, so two prompts share key ``i`` exactly
when their first ``(i+1)*B`` tokens are equal. Only full blocks get keys: a trailing partial
block is never shared (vLLM's rule). The replay's ``prefix_blocks`` text is byte-identical
for equal block ids, so equal ids become equal keys whatever block size the simulator uses
(up to the block that straddles the end of the shared part).

Keys are 64-bit BLAKE2b digests: stable across processes and runs. Must not import the
replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

_SEP = "\x1f"


def block_hashes(tokens: Sequence[str] | Sequence[int], block_size: int) -> tuple[int, ...]:
    """The chained keys of the full ``block_size``-token blocks of ``tokens``."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    keys: list[int] = []
    parent = b"\x00" * 8
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = _SEP.join(map(str, tokens[start : start + block_size]))
        digest = hashlib.blake2b(block.encode(), digest_size=8, key=parent).digest()
        keys.append(int.from_bytes(digest, "big"))
        parent = digest
    return tuple(keys)
