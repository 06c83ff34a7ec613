"""Settings of the pytest-benchmark suites, from environment variables (see README.md)."""

from __future__ import annotations

import os

import pytest


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


@pytest.fixture(scope="session")
def bench_settings() -> dict:
    from deszoo.bench.machine import usable_cores

    return {
        "env_steps": _env_int("DESZOO_BENCH_STEPS", 4096),
        "num_envs": _env_int("DESZOO_BENCH_ENVS", 8),
        "num_workers": _env_int("DESZOO_BENCH_WORKERS", usable_cores()),
        "rounds": _env_int("DESZOO_BENCH_ROUNDS", 5),
        "preset": os.environ.get("DESZOO_BENCH_PRESET", "default"),
    }
