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

from deszoo.core import Param, SimPyParallelEnv, discrete
from deszoo.core.params import choice, integer, optional, real

__all__ = ["ToyEnv", "legal_last", "legal_random", "rollout", "assert_same_rollouts"]

_DECIDING = np.array([0, 1, 1], dtype=np.int8)  # the mask of a deciding ToyEnv agent
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
