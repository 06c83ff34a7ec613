"""Versioned public name of the elevator scenario."""

from deszoo.envs.elevator.env import ElevatorEnv as parallel_env
from deszoo.envs.elevator.env import heuristic

env = parallel_env
__all__ = ["env", "heuristic", "parallel_env"]
