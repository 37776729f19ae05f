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

import pytest
from hypothesis import settings
from suiteparts import SERIAL_DIRS

settings.register_profile("deterministic", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile("deterministic")


# Tests that time real servers or real processes need the machine to themselves: `make
# test` runs everything else on several cores first (pytest-xdist), then these one at a
# time. Whole directories of them are listed in tests/support/suiteparts.py; a file
# elsewhere says so itself with ``pytestmark = pytest.mark.serial``
# (tests/test_serial_marks.py keeps that honest).


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_dir = config.rootpath / "tests"
    for item in items:
        parts = item.path.relative_to(tests_dir).parts
        if len(parts) > 1 and parts[0] in SERIAL_DIRS:
            item.add_marker(pytest.mark.serial)
