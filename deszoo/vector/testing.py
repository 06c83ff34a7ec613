"""Reusable checks for vector backends, and a toy env for fault and dead-agent tests.

``rollout`` records a run, ``assert_same_rollouts`` compares two runs bit for bit; a new
backend (``ray``, say) passes the shared suite in ``tests/test_vector.py`` when it agrees
with ``roundrobin`` there. :class:`ToyEnv` is tiny, has an agent that leaves early, and
fails on demand (raise, hang or die) at a given step, so fault tests stay short.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from deszoo.core import SimPyParallelEnv

__all__ = ["ToyEnv", "legal_last", "legal_random", "rollout", "assert_same_rollouts"]

FIELDS = ("obs", "rew", "term", "trunc", "action_mask", "needs_action", "live", "final_obs",
          "kind")


def legal_random(mask: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random legal action per row (rows with only the no-op get ``0``)."""
    return (rng.random(mask.shape) * mask).argmax(axis=1).astype(np.int64)


def legal_last(mask: np.ndarray) -> np.ndarray:
    """The highest legal action per row: a policy that depends on the row alone."""
    k = mask.shape[1]
    return (k - 1 - mask[:, ::-1].argmax(axis=1)).astype(np.int64)


def box_random(vec: Any, rng: np.random.Generator) -> np.ndarray:
    """Uniformly random ``Box`` actions, each row within its own agent's bounds."""
    r = vec.sim_spec.rows
    low = np.tile(r.act_low, (vec.num_sims, 1))
    high = np.tile(r.act_high, (vec.num_sims, 1))
    return rng.uniform(low, high).astype(np.float32)


def rollout(vec: Any, steps: int, seed: int | None = None, policy: str = "random") -> list:
    """Reset ``vec`` (with ``seed``), take ``steps`` steps; return every result, copied.

    ``Box`` actions are uniformly random within each row's bounds whatever ``policy`` says.
    """
    from gymnasium import spaces

    rng = np.random.default_rng(1234)
    obs, infos = vec.reset(seed=seed)
    record = [{"obs": obs.copy(), "action_mask": infos["action_mask"].copy()}]
    for _ in range(steps):
        mask = infos["action_mask"]
        if vec.sim_spec.rows.type is spaces.Box:
            acts = box_random(vec, rng)
        else:
            acts = legal_random(mask, rng) if policy == "random" else legal_last(mask)
        obs, rew, term, trunc, infos = vec.step(acts)
        item = {"obs": obs, "rew": rew, "term": term, "trunc": trunc}
        item.update({k: infos[k] for k in FIELDS if k in infos})
        record.append({k: np.array(v, copy=True) for k, v in item.items()})
    return record


def assert_same_rollouts(a: list, b: list, what: str = "") -> None:
    """Bit-identical: same dtypes, same shapes, same bytes, step for step."""
    assert len(a) == len(b), f"{what}: {len(a)} vs {len(b)} steps"
    for t, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x.keys() == y.keys(), f"{what}: step {t}: keys {sorted(x)} vs {sorted(y)}"
        for key in x:
            u, v = x[key], y[key]
            assert u.dtype == v.dtype and u.shape == v.shape, (
                f"{what}: step {t} {key}: {u.dtype}{u.shape} vs {v.dtype}{v.shape}"
            )
            if u.tobytes() != v.tobytes():
                rows = np.flatnonzero((u != v).reshape(len(u), -1).any(axis=1))
                raise AssertionError(f"{what}: step {t} {key} differs in rows {rows[:10]}")


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
    defaults = {
        "n_agents": 3,
        "horizon": 6.0,
        "leave_at": 2.5,
        "fail_at": None,
        "fail_episode": 1,
        "fail_kind": "raise",
        "fail_seed": None,
        "hang_s": 30.0,
    }

    def _setup(self):
        n = self.config["n_agents"]
        self._episodes = 0
        return [f"toy_{i}" for i in range(n)], np.zeros(3), np.ones(3), 3

    def _build(self):
        self._episodes += 1
        self._last = self.rng.random(len(self.possible_agents))  # seed-dependent first obs
        for i in range(len(self.possible_agents)):
            self.sim.process(self._agent(i))
        self.sim.process(self._end())

    def _agent(self, i: int):
        n = len(self.possible_agents)
        while True:
            action = yield self.decide(i, [0, 1, 1])
            self._last[i] = action / 2
            self.add_reward(i, float(action) * float(self.rng.random()))
            if i == n - 1 and self.sim.now >= self.config["leave_at"]:
                self.remove_agent(i)
                return
            yield self.sim.timeout(float(self.rng.uniform(0.5, 1.5)))

    def _end(self):
        yield self.sim.timeout(self.config["horizon"])
        self.end_episode()

    def _observe(self, i: int, out: np.ndarray) -> None:
        out[0] = min(1.0, self.sim.now / self.config["horizon"])
        out[1] = i / len(self.possible_agents)
        out[2] = self._last[i]

    def step_arrays(self, acts: np.ndarray) -> None:
        c = self.config
        if (
            c["fail_at"] == self.num_steps + 1
            and self._episodes == c["fail_episode"]
            and (c["fail_seed"] is None or self._seed_seq.entropy == c["fail_seed"])
        ):
            if c["fail_kind"] == "hang":
                time.sleep(c["hang_s"])
            elif c["fail_kind"] == "exit":
                os._exit(7)
            else:
                raise ValueError(f"toy failure at step {self.num_steps + 1}")
        super().step_arrays(acts)
