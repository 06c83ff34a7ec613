"""Record a vector env's run and compare two runs bit for bit.

``rollout`` resets a vector env, steps it with a policy that depends only on each row's mask
(or uniformly random legal actions from a fixed generator) and returns every result, copied;
``assert_same_rollouts`` says at which step and in which rows two such records differ.
``deszoo check`` runs one rollout per backend and compares them; a new backend agrees with
``roundrobin`` when ``assert_same_rollouts`` passes on its rollout.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["assert_same_rollouts", "box_random", "legal_last", "legal_random", "rollout"]

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
