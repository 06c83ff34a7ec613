"""SimPy's Carwash example as a deszoo env, the way a user writes one from docs/custom.md.

It lives outside the package on purpose: the tests run ``deszoo bench``, ``deszoo profile``
and ``deszoo check`` on it as ``carwash_env:CarwashEnv`` from this folder.
"""

import numpy as np

from deszoo.core import COMMON, Param, SimPyParallelEnv, discrete
from deszoo.core.params import integer, real


class Carwash:
    """Cars arrive at random; each wash bay washes one car at a time."""

    def __init__(self, env, rng, n_bays, t_inter, wash_time, choose):
        self.env, self.rng = env, rng
        self.waiting = []  # arrival times, oldest first
        self.washed = 0
        self.choose = choose
        self._arrived = env.event()
        for k in range(n_bays):
            env.process(self.bay(k, wash_time))
        env.process(self.arrivals(t_inter))

    def arrivals(self, t_inter):
        while True:
            yield self.env.timeout(self.rng.exponential(t_inter))
            self.waiting.append(self.env.now)
            self._arrived.succeed()
            self._arrived = self.env.event()

    def bay(self, k, wash_time):
        while True:
            if not self.waiting:
                yield self._arrived
                continue
            car = yield self.choose(k)
            if car not in self.waiting:  # another bay took it at the same instant
                continue
            self.waiting.remove(car)
            self.washed += 1
            yield self.env.timeout(wash_time * self.rng.uniform(0.8, 1.2))


class CarwashEnv(SimPyParallelEnv):
    """A dispatcher per wash bay picks which waiting car to wash; reward: cars washed."""

    metadata = {"name": "carwash_v0", "render_modes": []}
    params = {
        "n_bays": Param(2, integer(1, 100), "wash bays, one agent each"),
        "t_inter": Param(2.0, real(0, 1000, open_min=True), "mean minutes between cars"),
        "wash_time": Param(3.0, real(0, 1000, open_min=True), "minutes per wash"),
        "slots": Param(4, integer(1, 64), "waiting cars a bay can pick from"),
        "max_time": COMMON["max_time"].with_default(200.0),
    }
    presets = {"default": {}, "small": {"max_time": 50.0}}

    def _setup(self):
        names = [f"bay_{k}" for k in range(self.p.n_bays)]
        return discrete(names, np.zeros(self.p.slots), np.ones(self.p.slots), self.p.slots)

    def _build(self):
        self.wash = Carwash(self.sim, self.rng, self.p.n_bays, self.p.t_inter,
                            self.p.wash_time, self._choose)
        self._count = 0

    def _choose(self, k):
        seen = self.wash.waiting[: self.p.slots]
        mask = [1] * len(seen) + [0] * (self.p.slots - len(seen))
        return self.decide(k, mask, values=seen)

    def _flush(self, until):
        self.rew_buf += self.wash.washed - self._count
        self._count = self.wash.washed

    def _observe_all(self, obs):
        obs[:] = 0.0
        for j, arrived in enumerate(self.wash.waiting[: self.p.slots]):
            obs[:, j] = min(10.0, self.sim.now - arrived) / 10


def heuristic(obs, mask):
    return int(np.flatnonzero(mask)[0])
