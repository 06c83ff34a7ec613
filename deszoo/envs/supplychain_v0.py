"""Versioned public name of the supply chain scenario."""

from deszoo.core.aec import aec_constructors
from deszoo.envs.supplychain.env import SupplyChainEnv as parallel_env
from deszoo.envs.supplychain.env import heuristic

env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
