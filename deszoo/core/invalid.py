"""The invalid-action contract (``invalid_action``, see ``docs/bridge.md``), apart from the
step that applies it.

:class:`InvalidActions` is the part of an env's array step (:mod:`deszoo.core.stepper`)
that runs only when an action is wrong: in strict mode it refuses masked-out and missing
actions before anything changes; otherwise it replaces them by random legal actions, flags
them in the env's arrays, and warns once per scenario when a policy keeps sending them. It
owns its state (the episode's fallback generator, the count of replaced actions) and reads
and writes the env through its public arrays only.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import numpy as np
from gymnasium import spaces

from deszoo._links import doc
from deszoo.errors import MaskedActionError, MasksIgnoredWarning, MissingActionError

__all__ = ["InvalidActions", "MASK_WARNING_SHARE", "MASK_WARNING_AFTER", "WARNED"]

MASK_WARNING_SHARE = 0.01  # warn when at least this share of decisions was replaced
MASK_WARNING_AFTER = 100  # ... out of at least this many decisions of one env
WARNED: set[str] = set()  # scenarios warned about in this process


class InvalidActions:
    """Refuse (strict) or replace (``"random"``) the invalid actions of one env's steps.

    Args:
        env: the env (its ``rows``, ``possible_agents`` and per-agent arrays are read and
            written here).
        name: the scenario's name, for messages.
        penalty: reward subtracted for each replaced action (``invalid_penalty``).
    """

    def __init__(self, env: Any, name: str, penalty: float):
        self.env = env
        self.name = name
        self.penalty = penalty
        self.replaced = 0  # actions replaced since the env was built (the mask warning)
        self._episode_seq: np.random.SeedSequence | None = None
        self._rng: np.random.Generator | None = None  # drawn from the episode's seed lazily

    def new_episode(self, seq: np.random.SeedSequence) -> None:
        """Forget the last episode's generator; the next one spawns from ``seq`` when first
        needed (so legal play draws nothing from it)."""
        self._episode_seq = seq
        self._rng = None

    def replace(self, pending: dict, acts: Any, missing: np.ndarray | None,
                decisions: int) -> Any:
        """A random legal action for each deciding agent whose action is masked out or
        missing (drawn in row order from the episode's fallback generator); returns the new
        actions. ``decisions``: decisions taken since the env was built (for the warning)."""
        env = self.env
        rows, mask = env.rows, env.mask_buf
        bad = sorted(i for i in pending if (missing is not None and missing[i])
                     or not rows.legal_row(mask[i], acts[i]))
        if self._rng is None:
            self._rng = np.random.default_rng(self._episode_seq.spawn(1)[0])
        acts = acts.copy()
        discrete = rows.type is spaces.Discrete
        penalty = self.penalty
        invalid, counts, rew = env.invalid_buf, env.invalid_count, env.rew_buf
        for i in bad:
            acts[i] = rows.fallback(i, mask[i], self._rng)
            if discrete:
                acts[i] = int(acts[i])
            invalid[i] = True
            counts[i] += 1
            rew[i] -= penalty
        env.num_invalid += len(bad)
        self.replaced += len(bad)
        if self.replaced >= MASK_WARNING_SHARE * decisions >= (
                MASK_WARNING_SHARE * MASK_WARNING_AFTER):
            self._warn(decisions)
        return acts

    def _warn(self, decisions: int) -> None:
        name = self.name
        if name in WARNED or os.environ.get("DESZOO_WARN_MASKS", "1") == "0":
            return
        WARNED.add(name)
        warnings.warn(
            f"{name}: {self.replaced} of the {decisions} actions of agents at a "
            f"decision point ({self.replaced / decisions:.0%}) were masked out and "
            "replaced by random legal actions: the policy is not reading the masks "
            "(infos[agent]['action_mask'], or mask_in_obs=True). See "
            f"{doc('compatibility.md#masks')}. Silence: warnings.filterwarnings('ignore', "
            "category=deszoo.errors.MasksIgnoredWarning), or DESZOO_WARN_MASKS=0 for every "
            "process.", MasksIgnoredWarning, stacklevel=7)  # (the caller of env.step)

    def refuse(self, acts: np.ndarray, missing: np.ndarray | None, pending: dict) -> None:
        """Strict mode, in row order: a missing action of a deciding agent raises
        ``MissingActionError``, any masked-out action ``MaskedActionError`` (also a
        non-no-op action of an agent that is not deciding)."""
        env = self.env
        names = env.possible_agents
        legal = env.rows.legal(env.mask_buf, acts, np.arange(len(names)))
        if missing is not None:
            legal &= ~missing
        for i in np.flatnonzero(~legal).tolist():
            if missing is not None and missing[i]:
                if i in pending:
                    raise MissingActionError(
                        f"agent {names[i]!r} is at a decision point and needs an action; "
                        f"valid actions: {legal_actions(env.mask_buf, i)}"
                    )
                continue
            raise MaskedActionError(
                f"agent {names[i]!r} got action {acts[i]}; valid actions under its mask: "
                f"{legal_actions(env.mask_buf, i)}"
            )


def legal_actions(mask: np.ndarray, i: int) -> list[int]:
    """The entries of row ``i`` of ``mask`` that are set (for messages)."""
    return np.flatnonzero(mask[i]).tolist()
