"""Versioned public name of the elevator scenario."""

from deszoo.core.aec import aec_constructors
from deszoo.envs.elevator.env import ElevatorEnv as parallel_env
from deszoo.envs.elevator.env import heuristic

env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
