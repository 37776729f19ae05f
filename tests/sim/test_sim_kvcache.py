"""KV block accounting and the prefix cache's eviction order."""

from __future__ import annotations

import pytest

from analyzers.budget.engine.kvblocks import BlockPool


def test_allocate_free_and_usage() -> None:
    pool = BlockPool(4, caching=True)
    blocks = pool.allocate(3)
    assert pool.usage() == 0.75
    pool.free(blocks)
    assert pool.num_free == 4
    with pytest.raises(RuntimeError):
        pool.allocate(5)


def test_cached_blocks_are_shared_and_evicted_least_recently_freed_first() -> None:
    pool = BlockPool(4, caching=True)
    a = pool.allocate(2)
    pool.register(a[0], 11)
    pool.register(a[1], 12)
    pool.free(a)
    assert pool.match([11, 12, 13]) == a
    assert pool.can_allocate(2, a)
    assert not pool.can_allocate(3, a)
    pool.take(a)
    assert pool.num_free == 2
    pool.free(a)
    # Two fresh blocks come from the uncached ones; the third evicts the tail (12) first.
    pool.allocate(3)
    assert pool.match([11, 12]) == [a[0]]


def test_no_caching_matches_nothing() -> None:
    pool = BlockPool(2, caching=False)
    block = pool.allocate(1)
    pool.register(block[0], 5)
    pool.free(block)
    assert pool.match([5]) == []
