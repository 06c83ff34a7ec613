"""Flexible job shop scenario."""

from deszoo.envs.jobshop.env import JobShopEnv, heuristic

__all__ = ["JobShopEnv", "heuristic"]
