"""Chained block hashes: equal prefixes give equal keys, a divergence breaks every later key."""

from __future__ import annotations

from loadgen.sim.prefix import block_hashes


def test_chained_keys_follow_the_shared_prefix() -> None:
    a = [f"w{i}" for i in range(40)]
    b = [*a[:20], *(f"x{i}" for i in range(20))]
    ka, kb = block_hashes(a, 8), block_hashes(b, 8)
    assert len(ka) == 5  # full blocks only
    assert ka[:2] == kb[:2]
    assert all(x != y for x, y in zip(ka[2:], kb[2:], strict=True))
    assert block_hashes(a, 8) == ka  # stable


def test_same_block_in_another_position_differs() -> None:
    block = ["same"] * 4
    keys = block_hashes([*block, *block], 4)
    assert keys[0] != keys[1]
    assert block_hashes(["a", "b", "c"], 4) == ()
