"""Traffic signal control scenario."""

from deszoo.envs.traffic.env import TrafficEnv, heuristic

__all__ = ["TrafficEnv", "heuristic"]
