"""Versioned public name of the ride-hailing scenario."""

from deszoo.core.aec import aec_constructors
from deszoo.envs.ridehail.env import RideHailEnv as parallel_env
from deszoo.envs.ridehail.env import heuristic

env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
