"""The cyclic garbage collector while a replay runs.

CPython's collector runs a young-generation pass every 700 new container objects, and
every pass walks every young object still alive. During a replay those are the in-flight
requests' own objects (task, coroutines, futures, stream state, parser), so at a few
hundred streams the collector walks them again and again, promotes them, and pauses the
loop long enough to stamp reads late. The steady state makes no cyclic garbage (each
request's objects are freed by reference counting when it ends); failed requests can leave
cycles (an exception that holds its exchange).

So, for the replay: collect once, freeze what set-up made (never walked again), and raise
the young threshold to 50,000; passes still come now and then (objects that end on free
lists count too) and collect what failures left. The usual thresholds come back
afterwards. The measurements behind these numbers are in docs/performance.md. Must not
import anything of the replay.
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
