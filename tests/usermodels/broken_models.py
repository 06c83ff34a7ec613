"""Targets a user might give by mistake: a factory that needs an argument, one that returns
no env, and an AEC env (deszoo steps every agent at once)."""

from gymnasium import spaces
from pettingzoo import AECEnv
from plain_env import Counters


def needs(horizon):
    return Counters()


def not_env():
    return 42


class Turns(AECEnv):
    metadata = {"name": "turns_v0"}

    def __init__(self):
        self.possible_agents = ["a", "b"]

    def observation_space(self, agent):
        return spaces.Discrete(2)

    def action_space(self, agent):
        return spaces.Discrete(2)


class Multi(Counters):
    """MultiDiscrete actions, which the benchmark's policy (Discrete) cannot drive."""

    def __init__(self):
        super().__init__()
        self._act_space = spaces.MultiDiscrete([3, 2])

    def reset(self, seed=None, options=None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {}

    def step(self, actions):
        obs, rew, term, trunc, _ = super().step({a: int(x[0]) for a, x in actions.items()})
        return obs, rew, term, trunc, {a: {} for a in obs}
