"""One registry of scenarios: versioned name -> module that defines ``parallel_env``."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from deszoo.errors import ConfigError

__all__ = ["ENVS", "list_envs", "latest_versions", "make", "env_module"]

# One line per scenario. The module must define ``parallel_env`` and ``heuristic``.
ENVS: dict[str, str] = {
    "elevator_v0": "deszoo.envs.elevator_v0",
    "elevator_v1": "deszoo.envs.elevator_v1",
    "elevator_v2": "deszoo.envs.elevator_v2",
    "jobshop_v0": "deszoo.envs.jobshop_v0",
    "loadbalance_v0": "deszoo.envs.loadbalance_v0",
    "supplychain_v0": "deszoo.envs.supplychain_v0",
    "traffic_v0": "deszoo.envs.traffic_v0",
    "traffic_v1": "deszoo.envs.traffic_v1",
    "warehouse_v0": "deszoo.envs.warehouse_v0",
    "warehouse_v1": "deszoo.envs.warehouse_v1",
    "warehouse_v2": "deszoo.envs.warehouse_v2",
    "ridehail_v0": "deszoo.envs.ridehail_v0",
    "ridehail_v1": "deszoo.envs.ridehail_v1",
}


def list_envs() -> list[str]:
    """Sorted names of every registered scenario."""
    return sorted(ENVS)


def latest_versions() -> list[str]:
    """The newest version of each scenario, sorted (``elevator_v1``, not ``elevator_v0``)."""
    newest: dict[str, tuple[int, str]] = {}
    for name in ENVS:
        short, _, version = name.rpartition("_v")
        newest[short] = max(newest.get(short, (-1, "")), (int(version), name))
    return sorted(name for _, name in newest.values())


def env_module(name: str) -> ModuleType:
    """The versioned module of scenario ``name``."""
    if name not in ENVS:
        raise ConfigError(f"unknown scenario {name!r}; registered: {list_envs()}")
    return importlib.import_module(ENVS[name])


def make(name: str, **kwargs: Any):
    """Build scenario ``name`` with keyword arguments (``preset=...`` included)."""
    return env_module(name).parallel_env(**kwargs)
