"""Shared fixtures: one local Ray for the whole session, started only if a test needs it.

With ``DESZOO_SKIP_LOG=<file>`` set, the node ids of skipped tests (and of modules skipped
whole) are appended to that file, one per line: ``.ci/run`` runs the README's ``pytest``
with only the README's install, then reruns what it skipped (``pytest @<file>``) once every
extra is installed.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

HAS_RAY = importlib.util.find_spec("ray") is not None
# Where devkit (pytest's pythonpath, pyproject.toml) and the test modules live: Ray's workers
# need them too, as factories of envs defined there pickle by reference.
HERE = Path(__file__).resolve().parent
RAY_PYTHONPATH = os.pathsep.join([str(HERE), str(HERE.parent / "benchmarks")])


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray (2 CPUs) for the session; someone else's initialised Ray is used as is."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        yield ray
        return
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": RAY_PYTHONPATH}})
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture
def backend_opts(request):
    """``backend_opts(opts)``: the make_vec options, with Ray started first if they use it."""

    def prepare(opts: dict) -> dict:
        if opts.get("backend") == "ray":
            request.getfixturevalue("ray_session")
        return dict(opts)

    return prepare


def _log_skip(report) -> None:
    path = os.environ.get("DESZOO_SKIP_LOG")
    if path and report.skipped and report.nodeid:
        with open(path, "a") as f:
            f.write(report.nodeid + "\n")


def pytest_runtest_logreport(report):
    _log_skip(report)


def pytest_collectreport(report):
    _log_skip(report)
