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

__all__ = ["assert_same_rollouts", "box_random", "legal_last", "legal_random", "random_action",
           "rollout", "uniform"]

FIELDS = ("obs", "rew", "term", "trunc", "action_mask", "needs_action", "live", "final_obs",
          "kind")


def legal_random(mask: np.ndarray, rng: np.random.Generator,
                 nvec: np.ndarray | None = None) -> np.ndarray:
    """A uniformly random legal action per row (rows with only the no-op get ``0``); with
    ``nvec`` (``MultiDiscrete``), one per component of the mask's blocks."""
    if nvec is None:
        return (rng.random(mask.shape) * mask).argmax(axis=1).astype(np.int64)
    return np.stack([legal_random(block, rng) for block in _blocks(mask, nvec)], axis=1)


def legal_last(mask: np.ndarray, nvec: np.ndarray | None = None) -> np.ndarray:
    """The highest legal action per row (per component with ``nvec``): a policy that
    depends on the row alone."""
    if nvec is not None:
        return np.stack([legal_last(block) for block in _blocks(mask, nvec)], axis=1)
    k = mask.shape[1]
    return (k - 1 - mask[:, ::-1].argmax(axis=1)).astype(np.int64)


def _blocks(mask: np.ndarray, nvec: np.ndarray) -> list[np.ndarray]:
    """A ``MultiDiscrete`` mask's columns per component."""
    edges = np.cumsum(nvec)[:-1]
    return np.split(mask, edges, axis=-1)


def uniform(rng: np.random.Generator, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Uniform within ``[low, high]``; an unbounded side is sampled by an exponential (both
    unbounded: a standard normal), where ``rng.uniform`` would overflow."""
    low, high = np.broadcast_arrays(np.asarray(low, np.float64), np.asarray(high, np.float64))
    lo_ok, hi_ok = np.isfinite(low), np.isfinite(high)
    out = rng.uniform(np.where(lo_ok, low, 0.0), np.where(hi_ok, high, 0.0))
    tail = rng.exponential(size=low.shape)
    out = np.where(lo_ok & ~hi_ok, low + tail, out)
    out = np.where(~lo_ok & hi_ok, high - tail, out)
    return np.where(~lo_ok & ~hi_ok, rng.standard_normal(low.shape), out)


def random_action(space: Any, mask: Any, rng: np.random.Generator) -> Any:
    """A uniformly random action of one agent's ``space`` that its ``mask`` allows
    (``None``: any; a ``MultiDiscrete`` mask is flat, one block per component, or
    Gymnasium's tuple of them)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        if mask is not None and np.any(mask):
            return int(rng.choice(np.flatnonzero(mask))) + int(space.start)
        return int(rng.integers(space.n)) + int(space.start)
    if isinstance(space, spaces.MultiDiscrete):
        nvec = space.nvec.reshape(-1)
        if mask is None:
            picks = rng.integers(nvec)
        else:
            blocks = (list(mask) if isinstance(mask, tuple)
                      else _blocks(np.asarray(mask).reshape(-1), nvec))
            picks = np.array([rng.choice(np.flatnonzero(b)) if np.any(b) else 0
                              for b in blocks])
        return (picks + np.asarray(space.start).reshape(-1)).reshape(space.shape).astype(
            space.dtype)
    return uniform(rng, space.low, space.high).astype(space.dtype)


def box_random(vec: Any, rng: np.random.Generator) -> np.ndarray:
    """Uniformly random ``Box`` actions, each row within its own agent's bounds."""
    r = vec.sim_spec.rows
    low = np.tile(r.act_low, (vec.num_sims, 1))
    high = np.tile(r.act_high, (vec.num_sims, 1))
    return uniform(rng, low, high).astype(np.float32)


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
        rows = vec.sim_spec.rows
        nvec = rows.nvec if rows.type is spaces.MultiDiscrete else None
        if rows.type is spaces.Box:
            acts = box_random(vec, rng)
        elif policy == "random":
            acts = legal_random(mask, rng, nvec)
        else:
            acts = legal_last(mask, nvec)
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
