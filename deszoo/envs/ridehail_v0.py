"""Versioned public name of the ride-hailing scenario, version 0 (kept for reproducibility).

The same model as ``ridehail_v1`` but ``black_death=False`` by default: a driver who logs off
is terminated alone and leaves ``env.agents``, PettingZoo's native way. See
``deszoo/envs/ridehail/env.py`` for the scenario and its version history.
"""

from deszoo.core.aec import aec_constructors
from deszoo.core.params import BLACK_DEATH_V0
from deszoo.envs.ridehail.env import RideHailEnv, heuristic


class RideHailEnvV0(RideHailEnv):
    """Ride-hailing drivers with shifts, version 0: drivers who log off leave ``agents``."""

    metadata = {**RideHailEnv.metadata, "name": "ridehail_v0"}
    params = {**RideHailEnv.params, "black_death": BLACK_DEATH_V0}


parallel_env = RideHailEnvV0
env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
