"""Suite-wide test settings: hypothesis runs the same cases in every fresh clone.

Hypothesis draws new random cases on each run unless told otherwise, so a property that
holds for most inputs passes one day and fails the next on a fresh machine. The
``deterministic`` profile, active by default, seeds every property test from its own
source (``derandomize``): a given commit always runs the same cases, and a failure found
once is found again. It keeps no example database, so a local ``.hypothesis`` directory
cannot make one checkout run other cases than another, and it has no deadline, so a busy
machine does not fail a property on wall time. To search new inputs on purpose, run
``pytest --hypothesis-profile=explore`` and pin what it finds with ``@example``.
"""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("deterministic", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile("deterministic")
