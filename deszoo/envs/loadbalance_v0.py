"""Versioned public name of the load balancing scenario."""

from deszoo.envs.loadbalance.env import LoadBalanceEnv as parallel_env
from deszoo.envs.loadbalance.env import heuristic

env = parallel_env
__all__ = ["env", "heuristic", "parallel_env"]
