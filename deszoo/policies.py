"""Batched policies over a vector env's rows, and held-out evaluation.

A policy here is ``policy(obs, mask) -> actions``: ``obs`` of shape ``(rows, obs_dim)``,
``mask`` a bool array ``(rows, n_actions)``, actions an int array ``(rows,)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from deszoo.registry import env_module
from deszoo.vector import make_vec

__all__ = ["Policy", "random_policy", "heuristic_policy", "evaluate", "HELD_OUT_SEEDS"]

Policy = Callable[[np.ndarray, np.ndarray], np.ndarray]
HELD_OUT_SEEDS = range(10_000, 10_020)


def random_policy(seed: int = 0) -> Policy:
    """The uniformly random masked policy."""
    rng = np.random.default_rng(seed)
    return lambda obs, mask: (rng.random(mask.shape) * mask).argmax(axis=1)


def heuristic_policy(name: str) -> Policy:
    """Scenario ``name``'s built-in heuristic (a user's env ``MODULE:ATTR``: the module's
    ``heuristic(obs, mask)``), row by row."""
    if isinstance(name, str) and ":" in name:
        from deszoo.episodes import target
        from deszoo.errors import ConfigError

        h = target(name).heuristic
        if h is None:
            raise ConfigError(f"{name} has no heuristic(obs, mask) in its module")
    else:
        h = env_module(name).heuristic
    return lambda obs, mask: np.array([h(o, m) for o, m in zip(obs, mask, strict=True)])


def evaluate(policy: Policy, name: str | Callable[[], Any],
             seeds: Iterable[int] = HELD_OUT_SEEDS, **kw) -> np.ndarray:
    """One episode per seed, all at once; returns each episode's return (summed over agents).

    ``name``: a registered scenario, a user's ``MODULE:ATTR``, or an env class or factory.
    ``kw`` goes to the scenario (``preset="small"``, ...).
    """
    seeds = list(seeds)
    if isinstance(name, str) and ":" in name:  # a user's env (MODULE:ATTR): its factory
        from deszoo.episodes import env_factory

        env, kw = env_factory(name, kw.pop("preset", None), **kw), {}
    else:  # a registered name, or an env class or factory (make_vec takes both)
        env = name
    vec = make_vec(env, len(seeds), backend="roundrobin", autoreset_mode="SameStep", **kw)
    try:
        n, sims = vec.agents_per_sim, vec.num_sims
        dtype = vec.single_action_space.dtype  # Box actions stay floats
        obs, infos = vec.reset(seed=seeds)
        returns, done = np.zeros(sims), np.zeros(sims, dtype=bool)
        while not done.all():
            actions = np.asarray(policy(obs, infos["action_mask"].astype(bool)), dtype=dtype)
            obs, rew, _, _, infos = vec.step(actions)
            returns += np.where(done, 0.0, rew.reshape(sims, n).sum(axis=1))
            done |= infos["_final_obs"].reshape(sims, n).any(axis=1)  # episode ended (and reset)
    finally:
        vec.close()
    return returns
