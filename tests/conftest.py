"""Shared test configuration: hypothesis budgets.

Two settings profiles: ``optrace-ci`` (the default: hypothesis' own example counts, no
deadline — CI machines are slow and shared) and ``optrace-long`` (many more examples),
chosen by ``OPTRACE_LONG_FUZZ=1``. ``HYPOTHESIS_PROFILE`` names a profile explicitly.
Tests that pin ``max_examples`` keep it; the fuzz and property suites derive their
budgets from ``settings.default.max_examples`` (the loaded profile's), so one switch
scales them all: 100 by default, 2000 with ``OPTRACE_LONG_FUZZ=1``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

LONG_FUZZ = os.environ.get("OPTRACE_LONG_FUZZ", "") not in ("", "0")

# Under CI (CI=true) examples are derived from each test's name: a red CI run is
# reproducible and not a dice roll; local runs keep exploring.
settings.register_profile("optrace-ci", deadline=None, derandomize=bool(os.environ.get("CI")))
settings.register_profile(
    "optrace-long",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("optrace-long" if LONG_FUZZ else "optrace-ci"))

