"""Ride-hailing scenario."""

from deszoo.envs.ridehail.env import RideHailEnv, heuristic

__all__ = ["RideHailEnv", "heuristic"]
