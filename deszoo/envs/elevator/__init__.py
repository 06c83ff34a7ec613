"""Elevator bank scenario: cars choose their next stop."""

from deszoo.envs.elevator.env import ElevatorEnv, heuristic

__all__ = ["ElevatorEnv", "heuristic"]
