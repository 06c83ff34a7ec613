"""One seeded episode of a registered scenario or of a user's env, for ``deszoo run`` and the
episode charts (:mod:`deszoo.plots`).

A *target* is a registered name (``"jobshop_v0"``) or ``"MODULE:ATTR"`` naming a class or
zero-argument factory of a PettingZoo ``ParallelEnv``, importable from the current folder
(as ``deszoo check`` takes it). A user's module may define ``heuristic(obs, mask)`` next to
its env, as the scenario modules do; without one the policy is uniform random legal actions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from deszoo.errors import ConfigError
from deszoo.rollouts import random_action

__all__ = ["POLICIES", "EnvFactory", "Target", "env_factory", "is_user_env", "target", "play"]

POLICIES = ("heuristic", "random")


@dataclass(frozen=True)
class Target:
    """What to play: a label, how to build the env, its heuristic (if any), and the
    registered scenario name (``None`` for a user's env)."""

    label: str
    make: Callable[[], Any]
    heuristic: Callable[[Any, np.ndarray], Any] | None
    scenario: str | None


def is_user_env(text: str) -> bool:
    """Whether ``text`` names a user's env (``MODULE:ATTR``) rather than a registered one."""
    return ":" in text


@dataclass(frozen=True)
class EnvFactory:
    """A picklable zero-argument factory of a registered scenario or of ``MODULE:ATTR``.

    It pickles as the name and arguments, so a worker process imports the user's module
    itself (from its current folder, as :func:`deszoo.checks.load` does).
    """

    name: str
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __call__(self) -> Any:
        if is_user_env(self.name):
            from deszoo.checks import load

            return load(self.name)(**dict(self.kwargs))
        from deszoo.registry import make

        return make(self.name, **dict(self.kwargs))


def env_factory(text: str, preset: str | None = None, **kwargs: Any) -> EnvFactory:
    """The factory of ``text`` with the same defaults every command uses: a registered
    scenario gets ``preset`` (default ``"default"``); a user's env gets ``preset`` only when
    it is given and not ``"default"`` (a class without presets need not take the argument).
    """
    if is_user_env(text):
        if preset is not None and preset != "default":
            kwargs = {"preset": preset, **kwargs}
    else:
        kwargs = {"preset": preset or "default", **kwargs}
    return EnvFactory(text, tuple(sorted(kwargs.items())))


def user_presets(text: str) -> list[str] | None:
    """The presets a user's env class declares (``presets``), or ``None``."""
    from deszoo.checks import load

    presets = getattr(load(text), "presets", None)
    return list(presets) if isinstance(presets, dict) and presets else None


def target(text: str, preset: str | None = None) -> Target:
    """Resolve ``text`` (a registered name or ``MODULE:ATTR``); ``ConfigError`` if neither.

    ``preset`` is passed to a registered scenario (default ``"default"``); a user's env gets
    it only when given.
    """
    from deszoo.registry import env_module, list_envs

    if text in list_envs():
        module = env_module(text)
        chosen = preset or "default"
        return Target(text, lambda: module.parallel_env(preset=chosen),
                      getattr(module, "heuristic", None), text)
    if ":" not in text:
        raise ConfigError(f"unknown scenario {text!r}; registered: {', '.join(list_envs())}; "
                          "or give your own env as MODULE:ATTR")
    import importlib

    from deszoo.checks import load

    try:
        factory = load(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    heuristic = getattr(importlib.import_module(text.partition(":")[0]), "heuristic", None)
    kwargs = {} if preset in (None, "default") else {"preset": preset}  # as env_factory
    return Target(text, lambda: factory(**kwargs), heuristic, None)


def play(what: Target, seed: int, policy: str,
         on_step: Callable[[Any, dict, dict], None] | None = None,
         max_steps: int | None = None) -> tuple[Any, dict]:
    """Play one episode from ``reset(seed=seed)``; ``on_step(env, rewards, infos)`` is
    called after the reset (rewards empty) and after every step. ``max_steps`` stops an
    episode that has not ended after that many steps (``ended_by`` is then ``"step cap"``).

    Returns the env (episode over or stopped, not closed) and the figures of the episode.
    """
    if policy not in POLICIES:
        raise ConfigError(f"policy={policy!r}; valid: {', '.join(map(repr, POLICIES))}")
    if policy == "heuristic" and what.heuristic is None:
        raise ConfigError(f"{what.label} has no heuristic(obs, mask) next to it; use the "
                          "random policy")
    env = what.make()
    rng = np.random.default_rng(seed)
    obs, infos = env.reset(seed=seed)
    returns = dict.fromkeys(env.possible_agents, 0.0)
    decisions = steps = 0
    truncs: dict = {}
    if on_step is not None:
        on_step(env, {}, infos)
    capped = False
    while env.agents:
        if max_steps is not None and steps >= max_steps:
            capped = True
            break
        actions = {}
        for a in env.agents:
            info = infos.get(a, {}) or {}
            o = obs[a]
            mask = o["action_mask"] if isinstance(o, dict) else info.get("action_mask")
            decisions += bool(info.get("needs_action", True))
            if policy == "heuristic":
                actions[a] = what.heuristic(o, mask)
            else:  # from rng: the same seed replays the same episode
                actions[a] = random_action(env.action_space(a), mask, rng)
        obs, rewards, _, truncs, infos = env.step(actions)
        steps += 1
        for a, r in rewards.items():
            returns[a] += float(r)
        if on_step is not None:
            on_step(env, rewards, infos)
    clock = getattr(env, "now", None)
    return env, {
        "steps": steps,
        "decisions": decisions,
        "sim_time": float(clock) if clock is not None else None,
        "sim_events": getattr(env, "num_events", None),
        "ended_by": ("step cap" if capped else "truncation" if any(truncs.values())
                     else "termination"),
        "return_total": sum(returns.values()),
        "returns": returns,
    }
