"""Versioned public name of the traffic signal control scenario."""

from deszoo.core.aec import aec_constructors
from deszoo.envs.traffic.env import TrafficEnv as parallel_env
from deszoo.envs.traffic.env import heuristic

env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
