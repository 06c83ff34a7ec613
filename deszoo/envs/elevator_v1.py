"""Versioned public name of the elevator scenario, version 1 (kept for reproducibility).

The same model, rewards and trajectories as ``elevator_v2`` without its time limit
(``max_time`` ``None``), so an episode whose cars shuttle between floors after the arrivals
stop runs to ``max_steps``. See ``deszoo/envs/elevator/env.py`` for the scenario and its
version history.
"""

from deszoo.core.aec import aec_constructors
from deszoo.core.params import COMMON
from deszoo.envs.elevator.env import ElevatorEnv, heuristic


class ElevatorEnvV1(ElevatorEnv):
    """Elevator bank, version 1: no time limit (``max_time`` ``None``)."""

    metadata = {**ElevatorEnv.metadata, "name": "elevator_v1"}
    params = {**ElevatorEnv.params, "max_time": COMMON["max_time"]}
    presets = {preset: {k: v for k, v in values.items() if k != "max_time"}
               for preset, values in ElevatorEnv.presets.items()}


parallel_env = ElevatorEnvV1
env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
