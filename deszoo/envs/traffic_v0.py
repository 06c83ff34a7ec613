"""Versioned public name of the traffic signal control scenario, version 0 (kept for
reproducibility).

The same model as ``traffic_v1`` with agents named ``signal_{row}_{col}``. See
``deszoo/envs/traffic/env.py`` for the scenario and its version history.
"""

from deszoo.core.aec import aec_constructors
from deszoo.core.params import BLACK_DEATH_V0
from deszoo.envs.traffic.env import TrafficEnv, heuristic


class TrafficEnvV0(TrafficEnv):
    """Signalised grid, version 0: agents named ``signal_{row}_{col}``."""

    metadata = {**TrafficEnv.metadata, "name": "traffic_v0"}
    params = {**TrafficEnv.params, "black_death": BLACK_DEATH_V0}

    def _agent_names(self) -> list[str]:
        return [f"signal_{r}_{q}" for r in range(self.p.rows) for q in range(self.p.cols)]


parallel_env = TrafficEnvV0
env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
