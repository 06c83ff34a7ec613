"""Versioned public name of the ride-hailing scenario."""

from deszoo.envs.ridehail.env import RideHailEnv as parallel_env
from deszoo.envs.ridehail.env import heuristic

env = parallel_env
__all__ = ["env", "heuristic", "parallel_env"]
