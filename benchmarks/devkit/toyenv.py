"""A toy env for fault and dead-agent tests of the vector backends (not in the wheel).

:class:`ToyEnv` is tiny, has an agent that leaves early, and fails on demand (raise, hang or
die) at a given step, so fault tests stay short. Rollouts and their comparison are
:mod:`deszoo.rollouts`.
"""

from __future__ import annotations

import os
import time

import numpy as np

from deszoo.core import Param, SimPyParallelEnv, discrete
from deszoo.core.params import choice, integer, optional, real

__all__ = ["ToyEnv"]

_DECIDING = np.array([0, 1, 1], dtype=np.int8)  # the mask of a deciding ToyEnv agent


class ToyEnv(SimPyParallelEnv):
    """Agents decide at random times; the last agent leaves at ``leave_at``.

    Action ``1`` or ``2`` when deciding (``0`` is masked out then); reward ``action * u``
    with ``u`` uniform. The episode ends at ``horizon``. ``fail_at=k`` makes the ``k``-th
    step of the env's ``fail_episode``-th episode (1-based) fail as ``fail_kind``:
    ``"raise"`` (ValueError), ``"hang"`` (sleeps ``hang_s``) or ``"exit"`` (the process
    exits at once, as if killed); with ``fail_seed=s`` only an env reset with seed ``s``
    fails (in a vector env built with ``seed=b``, env ``s - b``).
    """

    metadata = {"render_modes": ["human", "ansi"], "name": "vectoy_v0"}
    params = {
        "n_agents": Param(3, integer(1), "agents"),
        "horizon": Param(6.0, real(0, open_min=True), "the episode ends at this time"),
        "leave_at": Param(2.5, real(0), "the last agent leaves at its first decision after this"),
        "fail_at": Param(None, optional(integer(1)), "the step (1-based) that fails"),
        "fail_episode": Param(1, integer(1), "the episode (1-based) in which it fails"),
        "fail_kind": Param("raise", choice("raise", "hang", "exit"), "how it fails"),
        "fail_seed": Param(None, optional(integer(0)), "only an env reset with this seed fails"),
        "hang_s": Param(30.0, real(0), "seconds a hang lasts"),
    }

    def _setup(self):
        self._episodes = 0
        names = [f"toy_{i}" for i in range(self.p.n_agents)]
        return discrete(names, np.zeros(3), np.ones(3), 3)

    def _build(self):
        self._episodes += 1
        n = len(self.possible_agents)
        self._last = self.rng.random(n)  # seed-dependent first obs
        for i in range(n):
            self.sim.process(self._agent(i))
        self.sim.process(self._end())

    def _agent(self, i: int):
        n = len(self.possible_agents)
        while True:
            action = yield self.decide(i, _DECIDING)
            self._last[i] = action / 2
            self.add_reward(i, float(action) * float(self.rng.random()))
            if i == n - 1 and self.sim.now >= self.p.leave_at:
                self.remove_agent(i)
                return
            yield self.sim.timeout(float(self.rng.uniform(0.5, 1.5)))

    def _end(self):
        yield self.sim.timeout(self.p.horizon)
        self.end_episode()

    def _observe_all(self, obs: np.ndarray) -> None:
        n = len(self.possible_agents)
        obs[:, 0] = min(1.0, self.sim.now / self.p.horizon)
        obs[:, 1] = np.arange(n) / n
        obs[:, 2] = self._last

    def step_arrays(self, acts: np.ndarray) -> None:
        p = self.p
        if (
            p.fail_at == self.num_steps + 1
            and self._episodes == p.fail_episode
            and (p.fail_seed is None or self._seed_seq.entropy == p.fail_seed)
        ):
            if p.fail_kind == "hang":
                time.sleep(p.hang_s)
            elif p.fail_kind == "exit":
                os._exit(7)
            else:
                raise ValueError(f"toy failure at step {self.num_steps + 1}")
        super().step_arrays(acts)
