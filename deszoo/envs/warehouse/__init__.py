"""Robotic order picking scenario."""

from deszoo.envs.warehouse.env import WarehouseEnv, heuristic

__all__ = ["WarehouseEnv", "heuristic"]
