"""Versioned public name of the warehouse scenario."""

from deszoo.core.aec import aec_constructors
from deszoo.envs.warehouse.env import WarehouseEnv as parallel_env
from deszoo.envs.warehouse.env import heuristic

env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
