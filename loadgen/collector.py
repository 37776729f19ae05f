"""The cyclic garbage collector while a replay runs.

CPython's collector runs a young-generation pass every 700 net new container objects, and
every pass walks every young object that is still alive. During a replay those are the
in-flight requests' own objects (task, coroutines, futures, stream state, parser: about 40
each), so at a few hundred streams the collector walks all of them again and again,
promoting them to older generations it then walks too: measured at 256 streams, about
100 passes and 12 µs of collector time per request, and pauses of several milliseconds
that stamp every read arriving meanwhile late. Yet the steady state makes no cyclic
garbage (a run of 5,120 requests left none to collect), and what a replay allocates is
freed by reference counting as each request ends.

So, for the replay: collect once and freeze what set-up made (never walked again), and
raise the young generation's threshold far above what the requests in flight hold. The
net count of young objects then stays below it, and the collector runs only if garbage
really accumulates (failed requests whose exceptions hold cycles, say), with the usual
thresholds back afterwards. Must not import anything of the replay.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000
"""Net new container objects between young-generation passes during a replay: about
1,000 requests in flight, or a few hundred with their records waiting to be written."""


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
