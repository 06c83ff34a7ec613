"""Bring your own SimPy model: from a plain model to parallel, seeded sampling for SB3.

The tutorial is docs/custom.md. Three parts:

1. ``Clinic``: a SimPy model written the way SimPy users write one (processes, a list as a
   queue, an event to wake idle nurses), with its decision behind one hook, ``choose(k)``:
   an event whose value is the patient nurse ``k`` treats next. Out of the box the hook is
   a rule (oldest patient first); nothing here knows about reinforcement learning.
2. ``ClinicEnv``: the lines that make it a PettingZoo ``ParallelEnv`` with deszoo's bridge
   (between the markers below; docs/custom.md counts them).
3. ``main``: many copies in parallel (``make_vec``, one process per core, one seed per
   copy), MaskablePPO through ``to_sb3``, and an evaluation against the rule.

Run: ``python examples/custom_model.py --timesteps 30000`` (needs ``deszoo[sb3]``).
"""

from __future__ import annotations

import argparse

import numpy as np


# ---- 1. the model, as a SimPy user has it -------------------------------------------------
class Clinic:
    """Patients arrive at random with a severity 1..3; each nurse treats one at a time."""

    def __init__(self, env, rng, n_nurses=2, arrival_rate=1.5, treat_time=1.0, choose=None):
        self.env, self.rng = env, rng
        self.treat_time = treat_time
        self.waiting = []  # [arrival time, severity] of each waiting patient, oldest first
        self.started = []  # (arrival time, severity, start time) of each patient treated
        self.choose = choose or self.oldest_first
        self._arrived = env.event()
        for k in range(n_nurses):
            env.process(self.nurse(k))
        env.process(self.arrivals(arrival_rate))

    def oldest_first(self, k):
        return self.env.timeout(0, value=self.waiting[0])  # the rule: an event with a patient

    def arrivals(self, rate):
        while True:
            yield self.env.timeout(self.rng.exponential(1 / rate))
            self.waiting.append([self.env.now, int(self.rng.integers(1, 4))])
            self._arrived.succeed()
            self._arrived = self.env.event()

    def nurse(self, k):
        while True:
            if not self.waiting:
                yield self._arrived
                continue
            patient = yield self.choose(k)
            if patient not in self.waiting:  # another nurse took them at the same instant
                continue
            self.waiting.remove(patient)
            self.started.append((*patient, self.env.now))
            yield self.env.timeout(self.treat_time * self.rng.uniform(0.5, 1.5))


# ---- 2. the env: what a deszoo user writes --------------------------------- wrapper: start
from deszoo.core import COMMON, Param, SimPyParallelEnv, discrete  # noqa: E402
from deszoo.core.params import integer, real  # noqa: E402


class ClinicEnv(SimPyParallelEnv):
    """Nurses choose which waiting patient to treat; reward: minus the severity-weighted
    hours that patients waited during the step, shared by the nurses."""

    metadata = {"name": "clinic_v0", "render_modes": ["human", "ansi"]}
    params = {
        "n_nurses": Param(2, integer(1, 1000), "nurses, one agent each"),
        "arrival_rate": Param(1.5, real(0, 1000, open_min=True), "patients per hour"),
        "slots": Param(6, integer(1, 64), "waiting patients a nurse can pick from"),
        "max_time": COMMON["max_time"].with_default(100.0),
    }

    def _setup(self):
        names = [f"nurse_{k}" for k in range(self.p.n_nurses)]
        size = 2 * self.p.slots  # per slot: hours waited (capped at 4) / 4, severity / 3
        return discrete(names, np.zeros(size), np.ones(size), self.p.slots)

    def _build(self):
        self.clinic = Clinic(self.sim, self.rng, self.p.n_nurses, self.p.arrival_rate,
                             choose=self._choose)
        self._booked, self._last = 0, 0.0

    def _choose(self, k):  # action j: the j-th oldest waiting patient
        seen = self.clinic.waiting[: self.p.slots]
        mask = [1] * len(seen) + [0] * (self.p.slots - len(seen))
        return self.decide(k, mask, values=seen)

    def _flush(self, until):  # severity x hours waited since the last step, by everyone
        last, clinic = self._last, self.clinic
        cost = sum(s * (until - max(t, last)) for t, s in clinic.waiting)
        cost += sum(s * (start - max(t, last)) for t, s, start in clinic.started[self._booked :])
        self.rew_buf -= cost / self.p.n_nurses
        self._booked, self._last = len(clinic.started), until

    def _observe_all(self, obs):
        obs[:] = 0.0
        for j, (arrived, severity) in enumerate(self.clinic.waiting[: self.p.slots]):
            obs[:, 2 * j] = min(4.0, self.sim.now - arrived) / 4
            obs[:, 2 * j + 1] = severity / 3
# ---- wrapper: end -------------------------------------------------------------------------


def oldest_first(obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The model's own rule as a policy over rows: slot 0 (the oldest) when deciding."""
    return np.zeros(len(obs), dtype=np.int64)


def most_severe(obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """A better rule: the most severe waiting patient, the oldest of them on a tie."""
    severity = np.where(mask, obs[:, 1::2], -1.0)
    return severity.argmax(axis=1).astype(np.int64)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timesteps", type=int, default=30_000)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--eval-seeds", type=int, default=20)
    args = parser.parse_args(argv)

    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import VecMonitor

    from deszoo.policies import evaluate, random_policy
    from deszoo.vector import make_vec, to_sb3

    torch.set_num_threads(1)  # the cores belong to the simulation workers
    # 3. many copies, one process per core, copy i seeded 0 + i; SB3 sees one row per nurse.
    vec = make_vec(ClinicEnv, args.envs, backend="shm", seed=0, autoreset_mode="SameStep")
    model = MaskablePPO("MlpPolicy", VecMonitor(to_sb3(vec)), n_steps=128, batch_size=256,
                        seed=0, device="cpu")  # VecMonitor: SB3 logs episode returns
    model.learn(args.timesteps)
    vec.close()

    def learned(obs, mask):
        return model.predict(obs, action_masks=mask, deterministic=True)[0]

    seeds = range(50_000, 50_000 + args.eval_seeds)  # held out: never seen in training
    scores = {name: float(evaluate(policy, ClinicEnv, seeds).mean()) for name, policy in [
        ("random", random_policy(0)), ("oldest first", oldest_first),
        ("most severe", most_severe), ("MaskablePPO", learned)]}
    for name, score in scores.items():
        print(f"{name:>14}: {score:8.1f}")
    return scores


if __name__ == "__main__":
    main()
