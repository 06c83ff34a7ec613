"""Small PettingZoo ``ParallelEnv`` s written as a user would write them (no deszoo base
class), for the tests of ``make_vec``'s dict-API path and of ``deszoo check``.

:class:`Kinds` has agents of two kinds (different observation sizes and ``Discrete``
action counts, a mask in ``infos``) and one agent that leaves early; :class:`Continuous`
has ``Box`` actions of two sizes. Both seed everything from ``reset(seed=...)``.
"""

from __future__ import annotations

import functools

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

__all__ = ["Kinds", "Continuous"]


class Kinds(ParallelEnv):
    """Two scouts (obs 3, ``Discrete(3)``) and a base (obs 5, ``Discrete(5)``).

    Each step every agent earns ``action * u`` (``u`` uniform); the base's odd actions are
    masked out on even steps; scout 1 leaves at step 4; the episode ends at step 9.
    """

    metadata = {"name": "kinds_v0", "render_modes": []}

    def __init__(self, horizon: int = 9):
        self.horizon = horizon
        self.possible_agents = ["scout_0", "scout_1", "base_0"]
        self.agents: list[str] = []
        self._obs = {a: spaces.Box(0, 1, (3,), np.float32) for a in self.possible_agents[:2]}
        self._obs["base_0"] = spaces.Box(0, 1, (5,), np.float32)
        self._act = {a: spaces.Discrete(3) for a in self.possible_agents[:2]}
        self._act["base_0"] = spaces.Discrete(5)
        self.np_random = np.random.default_rng()

    @functools.cache  # noqa: B019 - the same space object every call
    def observation_space(self, agent):
        return self._obs[agent]

    @functools.cache  # noqa: B019
    def action_space(self, agent):
        return self._act[agent]

    def _observe(self) -> dict:
        return {a: self.np_random.random(self._obs[a].shape).astype(np.float32)
                for a in self.agents}

    def _infos(self) -> dict:
        mask = np.ones(5, dtype=np.int8)
        if self.t % 2 == 0:
            mask[1::2] = 0
        infos = {a: {"action_mask": np.ones(3, dtype=np.int8)} for a in self.agents}
        if "base_0" in infos:
            infos["base_0"] = {"action_mask": mask}
        return infos

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._observe(), self._infos()

    def step(self, actions):
        self.t += 1
        rew = {a: float(actions.get(a, 0)) * float(self.np_random.random()) for a in self.agents}
        end = self.t >= self.horizon
        term = {a: end or (a == "scout_1" and self.t == 4) for a in self.agents}
        trunc = dict.fromkeys(self.agents, False)
        obs = self._observe()
        self.agents = [a for a in self.agents if not term[a]]
        infos = self._infos()
        for a in term:
            infos.setdefault(a, {})
        return obs, rew, term, trunc, infos


class Continuous(ParallelEnv):
    """Two agents with ``Box`` actions of size 1 and 2: reward minus the distance of the
    action to a hidden target; 6 steps per episode."""

    metadata = {"name": "continuous_v0", "render_modes": []}

    def __init__(self):
        self.possible_agents = ["one_0", "two_0"]
        self.agents: list[str] = []
        self._act = {"one_0": spaces.Box(-1, 1, (1,), np.float32),
                     "two_0": spaces.Box(0, 2, (2,), np.float32)}
        self._obs = {a: spaces.Box(-1, 2, (2,), np.float32) for a in self.possible_agents}
        self.np_random = np.random.default_rng()

    def observation_space(self, agent):
        return self._obs[agent]

    def action_space(self, agent):
        return self._act[agent]

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        self.t = 0
        self.agents = list(self.possible_agents)
        self.target = {a: self.np_random.uniform(self._act[a].low, self._act[a].high)
                       for a in self.agents}
        return self._obs_now(), {a: {} for a in self.agents}

    def _obs_now(self):
        return {a: np.array([self.t / 6, self.target[a][0]], dtype=np.float32)
                for a in self.agents}

    def step(self, actions):
        self.t += 1
        rew = {a: -float(np.abs(np.asarray(actions[a]) - self.target[a]).sum())
               for a in self.agents}
        end = self.t >= 6
        term = dict.fromkeys(self.agents, end)
        trunc = dict.fromkeys(self.agents, False)
        obs = self._obs_now()
        infos = {a: {} for a in self.agents}
        if end:
            self.agents = []
        return obs, rew, term, trunc, infos
