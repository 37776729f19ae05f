"""KV-cache blocks of one instance: allocation, reference counts and the prefix cache.

The cache holds ``num_blocks`` blocks of ``block_size`` tokens (the budget model's KV
capacity divided by the block size). A sequence owns the blocks its tokens occupy. With the
prefix cache on, a full prompt block is registered under its chained hash (the
simulator's ``loadgen.sim.prefix``) once computed; a later sequence whose prompt starts with
the same blocks takes them (reference count + 1) instead of recomputing them. A block whose count
drops to 0 becomes free but keeps its hash until it is reallocated, least recently freed
first, so a shared prefix survives as long as memory allows (vLLM's eviction order).

Pure and clock-free: must not import ``loadgen``, httpx or polars.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice


class BlockPool:
    """Fixed pool of KV blocks with reference counts and an LRU of free (cached) blocks."""

    def __init__(self, num_blocks: int, *, caching: bool) -> None:
        if num_blocks < 1:
            raise ValueError(f"a KV cache needs at least one block, got {num_blocks}")
        self.num_blocks = num_blocks
        self.caching = caching
        self._refs = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._by_hash: dict[int, int] = {}
        # The free blocks in reuse order are the uncached ones (a stack: its top is reused
        # first; fresh blocks start at the bottom in index order) followed by the cached
        # ones, least recently freed first.
        self._uncached: list[int] = list(range(num_blocks - 1, -1, -1))
        # A plain dict keeps insertion order too, at a fraction of an OrderedDict's cost
        # per insertion and deletion (no linked node to allocate): eviction takes its head.
        self._cached: dict[int, None] = {}
        self.version = 0
        """Counts the changes of the pool (allocations, frees, takes, registrations): a
        caller that found a request does not fit may skip asking again until it moves."""

    @property
    def num_free(self) -> int:
        """Blocks no sequence holds (cached ones included: they can be reallocated)."""
        return len(self._uncached) + len(self._cached)

    def usage(self) -> float:
        """Fraction of blocks held by sequences, 0..1 (vLLM's ``kv_cache_usage_perc``)."""
        return 1.0 - self.num_free / self.num_blocks

    def match(self, hashes: Sequence[int]) -> list[int]:
        """Blocks caching the longest prefix of ``hashes`` (does not take them)."""
        if not self.caching:
            return []
        hits: list[int] = []
        for key in hashes:
            block = self._by_hash.get(key)
            if block is None:
                break
            hits.append(block)
        return hits

    def can_allocate(self, new_blocks: int, matched: Sequence[int] = ()) -> bool:
        """Whether ``new_blocks`` fresh blocks fit once the ``matched`` ones are taken."""
        idle_hits = sum(1 for b in matched if self._refs[b] == 0)
        return self.num_free - idle_hits >= new_blocks

    def take(self, blocks: Sequence[int]) -> None:
        """Add a holder to cached ``blocks`` (from :meth:`match`)."""
        self.version += 1
        for block in blocks:
            if self._refs[block] == 0:
                del self._cached[block]  # a free block with a hash is a cached one
            self._refs[block] += 1

    def allocate(self, n: int) -> list[int]:
        """``n`` fresh blocks, evicting the least recently freed cached ones first."""
        self.version += 1
        uncached, cached = self._uncached, self._cached
        if n > len(uncached) + len(cached):
            raise RuntimeError(f"asked for {n} KV blocks, {self.num_free} free")
        refs = self._refs
        k = min(n, len(uncached))
        out = uncached[len(uncached) - k :]
        out.reverse()  # the top of the stack first
        del uncached[len(uncached) - k :]
        for block in out:
            refs[block] = 1
        if k < n:
            # A long prompt evicts hundreds of cached blocks at once: take them in bulk.
            # Every cached block has a hash (``free`` caches only those).
            m = n - k
            if m == len(cached):
                evicted = list(cached)
                cached.clear()
            else:
                evicted = list(islice(cached, m))
                for block in evicted:
                    del cached[block]
            hashes, by_hash = self._hash, self._by_hash
            for block in evicted:
                del by_hash[hashes[block]]  # type: ignore[arg-type]
                hashes[block] = None
                refs[block] = 1
            out += evicted
        return out

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one holder of each block; the tail of a sequence is evicted before its head."""
        self.version += 1
        uncached, cached, refs, hashes = self._uncached, self._cached, self._refs, self._hash
        caching = self.caching
        for block in reversed(blocks):
            left = refs[block] = refs[block] - 1
            if left == 0:
                if caching and hashes[block] is not None:
                    cached[block] = None
                else:
                    uncached.append(block)  # uncached: reuse first

    def register(self, block: int, key: int) -> None:
        """Note that ``block`` now holds the full prompt block with chained hash ``key``."""
        self.version += 1
        if not self.caching or self._hash[block] is not None or key in self._by_hash:
            return
        self._hash[block] = key
        self._by_hash[key] = block

    def register_run(
        self, blocks: Sequence[int], keys: Sequence[int], start: int, stop: int
    ) -> None:
        """:meth:`register` ``blocks[i]`` under ``keys[i]`` for ``i`` in ``start..stop-1``."""
        self.version += 1
        if not self.caching:
            return
        hashes, by_hash = self._hash, self._by_hash
        for block, key in zip(blocks[start:stop], keys[start:stop], strict=True):
            if hashes[block] is None and key not in by_hash:
                hashes[block] = key
                by_hash[key] = block
