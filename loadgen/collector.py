"""The cyclic garbage collector while a replay runs.

CPython's collector runs a young-generation pass every 700 new container objects, and
every pass walks every young object that is still alive. During a replay those are the
in-flight requests' own objects (task, coroutines, futures, stream state, parser: about 40
each), so at a few hundred streams the collector walks them again and again and promotes
them to older generations it then walks too. Measured with 256 streams of 4-token
responses, 10,240 requests: 235 young, 21 older and 1 full pass, 149 ms in all (about 15 µs
per request), with pauses of 3 ms (older) and 26 ms (full) that stamp every read arriving
meanwhile late. The steady state makes no cyclic garbage (a run of 5,120 requests left
none to collect): what a replay allocates is freed by reference counting as each request
ends, but failed ones can leave cycles (an exception that holds its exchange).

So, for the replay: collect once and freeze what set-up made (never walked again), and
raise the young threshold to 50,000. CPython's young count also grows with objects that
end on its free lists (about 2.6 per request here), so passes still come, about every
20,000 requests and about 15 ms each at 256 streams, and collect whatever cycles failures
left: 2 passes and 30 ms for the same 10,240 requests. The usual thresholds come back
afterwards. Must not import anything of the replay.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000
"""New container objects between young-generation passes during a replay (CPython's
default: 700): far above the requests in flight at a few hundred streams."""


@contextmanager
def steady_collector(young_threshold: int = YOUNG_THRESHOLD) -> Iterator[None]:
    """Freeze the objects that exist now and keep the collector quiet until the block
    ends (see the module notes); then restore the thresholds and unfreeze."""
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(max(thresholds[0], young_threshold), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
