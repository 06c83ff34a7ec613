"""Load balancing scenario: dispatchers route requests to server pools."""

from deszoo.envs.loadbalance.env import LoadBalanceEnv, heuristic

__all__ = ["LoadBalanceEnv", "heuristic"]
