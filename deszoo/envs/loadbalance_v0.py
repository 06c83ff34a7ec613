"""Versioned public name of the load balancing scenario."""

from deszoo.core.aec import aec_constructors
from deszoo.envs.loadbalance.env import LoadBalanceEnv as parallel_env
from deszoo.envs.loadbalance.env import heuristic

env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
