"""Versioned public name of the robotic order picking scenario."""

from deszoo.envs.warehouse.env import WarehouseEnv as parallel_env
from deszoo.envs.warehouse.env import heuristic

env = parallel_env
__all__ = ["env", "heuristic", "parallel_env"]
