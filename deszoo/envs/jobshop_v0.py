"""Versioned public name of the job shop scenario."""

from deszoo.envs.jobshop.env import JobShopEnv as parallel_env
from deszoo.envs.jobshop.env import heuristic

env = parallel_env
__all__ = ["env", "heuristic", "parallel_env"]
