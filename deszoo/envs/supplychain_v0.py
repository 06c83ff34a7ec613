"""Versioned public name of the supply chain scenario."""

from deszoo.envs.supplychain.env import SupplyChainEnv as parallel_env
from deszoo.envs.supplychain.env import heuristic

env = parallel_env
__all__ = ["env", "heuristic", "parallel_env"]
