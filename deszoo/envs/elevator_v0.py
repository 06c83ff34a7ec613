"""Versioned public name of the elevator scenario, version 0 (kept for reproducibility).

The same model as ``elevator_v1`` (no time limit) with v0's reward: each car pays 1/n_cars
of the waiting passenger-minutes and ``ride_weight`` (0.5) per minute of its own riders. See
``deszoo/envs/elevator/env.py`` for the scenario and its version history.
"""

import numpy as np

from deszoo.core.aec import aec_constructors
from deszoo.core.params import BLACK_DEATH_V0
from deszoo.envs.elevator.env import MINUTE, heuristic
from deszoo.envs.elevator_v1 import ElevatorEnvV1


class ElevatorEnvV0(ElevatorEnvV1):
    """Elevator bank, version 0: a car's own riders weigh on its reward alone."""

    metadata = {**ElevatorEnvV1.metadata, "name": "elevator_v0"}
    params = {**ElevatorEnvV1.params,
              "ride_weight": ElevatorEnvV1.params["ride_weight"].with_default(0.5),
              "black_death": BLACK_DEATH_V0}

    def _flush(self, until: float) -> None:
        wait, ride = self.model.take_areas(until)
        share, weight = wait / len(ride), self.p.ride_weight
        # (plain floats: faster than numpy on a few cars; one float32 rounding, as before)
        self.rew_buf -= np.array([(share + weight * r) / MINUTE for r in ride], dtype=np.float32)


parallel_env = ElevatorEnvV0
env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
