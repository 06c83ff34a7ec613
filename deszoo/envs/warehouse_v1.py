"""Versioned public name of the warehouse scenario, version 1 (kept for reproducibility).

The same model, actions, rewards and trajectories as ``warehouse_v2`` without its time limit
(``max_time`` ``None``), so an episode whose robots keep waiting runs to ``max_steps``. See
``deszoo/envs/warehouse/env.py`` for the scenario and its version history.
"""

from deszoo.core.aec import aec_constructors
from deszoo.core.params import COMMON
from deszoo.envs.warehouse.env import WarehouseEnv, heuristic


class WarehouseEnvV1(WarehouseEnv):
    """Robotic order picking, version 1: no time limit (``max_time`` ``None``)."""

    metadata = {**WarehouseEnv.metadata, "name": "warehouse_v1"}
    params = {**WarehouseEnv.params, "max_time": COMMON["max_time"]}
    presets = {preset: {k: v for k, v in values.items() if k != "max_time"}
               for preset, values in WarehouseEnv.presets.items()}


parallel_env = WarehouseEnvV1
env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
