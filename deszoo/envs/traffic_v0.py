"""Versioned public name of the traffic signal control scenario."""

from deszoo.envs.traffic.env import TrafficEnv as parallel_env
from deszoo.envs.traffic.env import heuristic

env = parallel_env
__all__ = ["env", "heuristic", "parallel_env"]
