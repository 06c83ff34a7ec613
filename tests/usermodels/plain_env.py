"""A plain PettingZoo ParallelEnv (no deszoo base class), as a user might have one: two
counters, each may add 0, 1 or 2 per step; the episode ends at step 50."""

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class Counters(ParallelEnv):
    metadata = {"name": "counters_v0"}

    def __init__(self):
        self.possible_agents = ["a", "b"]
        self.agents = []
        self._obs_space = spaces.Box(0.0, 1.0, (2,), dtype=np.float32)
        self._act_space = spaces.Discrete(3)

    def observation_space(self, agent):
        return self._obs_space  # the same object every call, as PettingZoo requires

    def action_space(self, agent):
        return self._act_space

    def _obs(self):
        return {a: np.array([self.t / 50, self.total[a] / 100], dtype=np.float32)
                for a in self.agents}

    def reset(self, seed=None, options=None):
        if seed is not None or not hasattr(self, "rng"):  # else: the seeded stream goes on
            self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        self.total = dict.fromkeys(self.agents, 0)
        return self._obs(), {a: {"action_mask": np.array([1, 1, 1], dtype=np.int8)}
                             for a in self.agents}

    def step(self, actions):
        self.t += 1
        for a, x in actions.items():
            self.total[a] += int(x) + int(self.rng.integers(0, 2))
        done = self.t >= 50
        obs = self._obs()
        rewards = {a: float(actions[a]) for a in self.agents}
        terms = {a: done for a in self.agents}
        truncs = {a: False for a in self.agents}
        infos = {a: {"action_mask": np.array([1, 1, int(self.t % 2 == 0)], dtype=np.int8)}
                 for a in self.agents}
        if done:
            self.agents = []
        return obs, rewards, terms, truncs, infos
