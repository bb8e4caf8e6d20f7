"""Shared test configuration: hypothesis budgets, and a home of the tests' own.

No test touches the real home: the user's state directory (where optrace records the
journals it writes, `$XDG_STATE_HOME/optrace`) and config directory (the user-level
`config.toml` that may trust repositories) point into a temporary directory for the whole
session, subprocesses included; tests that need a fresh one use the `state_home` fixture.
The cache directory (`$XDG_CACHE_HOME/optrace`, where check keeps its reports) is a fresh
one for every test: a test that patches optrace's internals must not be answered from
another test's run.

Two settings profiles: ``optrace-ci`` (the default: hypothesis' own example counts, no
deadline — CI machines are slow and shared) and ``optrace-long`` (many more examples),
chosen by ``OPTRACE_LONG_FUZZ=1``. ``HYPOTHESIS_PROFILE`` names a profile explicitly.
Tests that pin ``max_examples`` keep it; the fuzz and property suites derive their
budgets from ``settings.default.max_examples`` (the loaded profile's), so one switch
scales them all: 100 by default, 2000 with ``OPTRACE_LONG_FUZZ=1``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from optrace.cli.deferred import install as install_deferred
from optrace.engine import renameat

# The pipeline's Python layers and the rule registry are handed what they import at
# first use as the CLI hands it (optrace/deferred.py): tests call the pipeline directly too.
install_deferred()

# Set at import, before any test module runs optrace (some compute at import time) or a
# module-scoped fixture forks a child that must see the same state directory.
_HOME = tempfile.mkdtemp(prefix="optrace-test-home-")
os.environ["XDG_STATE_HOME"] = os.path.join(_HOME, "state")
os.environ["XDG_CONFIG_HOME"] = os.path.join(_HOME, "config")
os.environ["XDG_CACHE_HOME"] = os.path.join(_HOME, "cache")


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(autouse=True)
def _fresh_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def state_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh, empty home for one test: XDG_STATE_HOME and XDG_CONFIG_HOME under it."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    yield home

@pytest.fixture(scope="session")
def exchanges(tmp_path_factory: pytest.TempPathFactory) -> bool:
    """Whether `commit` swaps files with renameat2 (RENAME_EXCHANGE) here: the call exists
    and the tests' filesystem takes it. Then every old file stays at its temp name until
    the operator is written; elsewhere commit falls back to a plain rename."""
    probe = tmp_path_factory.mktemp("renameat2")
    (probe / "a").write_bytes(b"a")
    (probe / "b").write_bytes(b"b")
    try:
        renameat.exchange(probe / "a", probe / "b")
    except renameat.Unsupported:
        return False
    return (probe / "a").read_bytes() == b"b"


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

