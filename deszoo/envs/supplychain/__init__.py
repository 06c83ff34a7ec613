"""Multi-echelon supply chain scenario (the beer game, generalised)."""

from deszoo.envs.supplychain.env import SupplyChainEnv, heuristic

__all__ = ["SupplyChainEnv", "heuristic"]
