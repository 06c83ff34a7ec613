"""Versioned public name of the job shop scenario."""

from deszoo.core.aec import aec_constructors
from deszoo.envs.jobshop.env import JobShopEnv as parallel_env
from deszoo.envs.jobshop.env import heuristic

env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
