"""Agents of different kinds, and how their rows share one batch.

A scenario (or any PettingZoo env run through :mod:`deszoo.vector`) describes its agents
as :class:`Group` s: agents of one kind share an observation ``Box`` and an action space.
One env's agents may have different spaces, but one action *type* (``Discrete``,
``MultiDiscrete`` or ``Box``). In the arrays every agent is one row, **padded**:

* observations: ``(n_agents, D)``, ``D`` the largest observation size; an agent's own
  observation is the first ``d`` entries of its row, the rest are zeros;
* masks: ``(n_agents, K)``: ``Discrete(n)`` -> ``n`` entries (``K`` = the largest ``n``; the
  entries past an agent's own ``n`` are 0, so those actions are masked out);
  ``MultiDiscrete(nvec)`` -> ``sum(nvec)`` entries, one block per component (every group
  must have the same ``nvec``); ``Box`` -> one entry, always 1 (no mask);
* actions: ``Discrete``: one int per row; ``MultiDiscrete``: ``len(nvec)`` ints per row;
  ``Box``: ``A`` floats per row, ``A`` the largest action size (an agent reads its first
  ``a``);
* ``kind``: each row's group index, in ``infos["kind"]`` of a vector env, so a shared policy
  can tell kinds apart (SuperSuit's ``agent_indicator`` idea).

Batching the kinds this way (rather than one batch per kind, as TorchRL and BenchMARL group
agents) keeps one Gymnasium ``VectorEnv`` with one policy over every row, which is what
Stable-Baselines3 and SuperSuit-style parameter sharing expect.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from deszoo.errors import ConfigError, InvalidActionError

__all__ = ["AgentRows", "Group", "discrete"]

ACTION_TYPES = (spaces.Discrete, spaces.MultiDiscrete, spaces.Box)


@dataclass(frozen=True)
class Group:
    """Agents of one kind: their names, observation ``Box`` and action space."""

    names: Sequence[str]
    observation: spaces.Box
    action: spaces.Space


def discrete(names: Sequence[str], low, high, n: int) -> Group:
    """The common case: a flat float32 ``Box(low, high)`` and ``Discrete(n)``."""
    low = np.asarray(low, dtype=np.float32)
    high = np.asarray(high, dtype=np.float32)
    return Group(list(names), spaces.Box(low, high, dtype=np.float32), spaces.Discrete(int(n)))


class AgentRows:
    """The padded row layout of a list of groups (see the module docstring)."""

    def __init__(self, groups: Sequence[Group], name: str = "env"):
        if not groups or not all(isinstance(g, Group) for g in groups):
            raise ConfigError(f"{name}: _setup() must return one Group or a list of Groups")
        kinds = {type(g.action) for g in groups}
        if len(kinds) > 1 or not kinds <= set(ACTION_TYPES):
            raise ConfigError(
                f"{name}: agents of one env must share one action type (Discrete, "
                f"MultiDiscrete or Box); got {sorted(k.__name__ for k in kinds)}"
            )
        for g in groups:
            box = g.observation
            if not isinstance(box, spaces.Box) or len(box.shape) != 1:
                raise ConfigError(f"{name}: observations must be flat Box spaces, got {box}")
        self.groups = list(groups)
        self.type = kinds.pop()
        self.names = [a for g in groups for a in g.names]
        if len(set(self.names)) != len(self.names):
            raise ConfigError(f"{name}: agent names must be unique")
        self.kind = np.concatenate(
            [np.full(len(g.names), k, dtype=np.int16) for k, g in enumerate(groups)]
        )
        self.obs_dim = max(int(g.observation.shape[0]) for g in groups)
        self.obs_dims = np.array([g.observation.shape[0] for g in groups])[self.kind]
        acts = [g.action for g in groups]
        if self.type is spaces.Discrete:
            self.n = np.array([int(a.n) for a in acts])[self.kind]  # per agent
            self.mask_dim = int(self.n.max())
            self.act_shape: tuple[int, ...] = ()
            self.act_dtype = np.dtype(np.int64)
        elif self.type is spaces.MultiDiscrete:
            nvecs = {tuple(int(x) for x in a.nvec.reshape(-1)) for a in acts}
            if len(nvecs) > 1 or any(len(a.nvec.shape) != 1 for a in acts):
                raise ConfigError(f"{name}: MultiDiscrete groups must share one flat nvec")
            self.nvec = np.array(nvecs.pop(), dtype=np.int64)
            self.offsets = np.concatenate([[0], np.cumsum(self.nvec)[:-1]])
            self.mask_dim = int(self.nvec.sum())
            self.act_shape = (len(self.nvec),)
            self.act_dtype = np.dtype(np.int64)
        else:
            if any(len(a.shape) != 1 for a in acts):
                raise ConfigError(f"{name}: Box actions must be flat")
            self.act_dim = max(int(a.shape[0]) for a in acts)
            self.act_dims = np.array([a.shape[0] for a in acts])[self.kind]
            self.mask_dim = 1
            self.act_shape = (self.act_dim,)
            self.act_dtype = np.dtype(np.float32)
            low = np.zeros((len(self.names), self.act_dim), dtype=np.float32)
            high = np.zeros_like(low)
            for i, k in enumerate(self.kind):
                a = acts[k]
                low[i, : a.shape[0]] = a.low
                high[i, : a.shape[0]] = a.high
            self.act_low, self.act_high = low, high

    # ---- rows -------------------------------------------------------------------------
    def noop_mask(self) -> np.ndarray:
        """The mask row of an agent not at a decision point: the no-op only."""
        row = np.zeros(self.mask_dim, dtype=np.int8)
        if self.type is spaces.MultiDiscrete:
            row[self.offsets] = 1
        else:
            row[0] = 1
        return row

    def full_mask(self, i: int) -> np.ndarray:
        """Every action of agent ``i``'s own space allowed."""
        row = np.zeros(self.mask_dim, dtype=np.int8)
        if self.type is spaces.Discrete:
            row[: self.n[i]] = 1
        else:
            row[:] = 1
        return row

    def legal(self, mask: np.ndarray, acts: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Per row: does ``acts`` pass the mask (always True for ``Box``)."""
        if self.type is spaces.Discrete:
            return mask[rows, acts].astype(bool)
        if self.type is spaces.MultiDiscrete:
            return mask[rows[:, None], self.offsets[None, :] + acts].all(axis=1)
        return np.ones(len(rows), dtype=bool)

    def legal_row(self, mask_row: np.ndarray, act) -> bool:
        """Does one row's action ``act`` pass its mask (always True for ``Box``)."""
        if self.type is spaces.Discrete:
            return bool(mask_row[act])
        if self.type is spaces.MultiDiscrete:
            return bool(mask_row[self.offsets + act].all())
        return True

    def fallback(self, i: int, mask_row: np.ndarray, rng: np.random.Generator):
        """A uniformly random action of agent ``i`` that its mask allows."""
        if self.type is spaces.Discrete:
            choices = np.flatnonzero(mask_row)
            return choices[int(rng.integers(len(choices)))]
        if self.type is spaces.MultiDiscrete:
            out = np.empty(len(self.nvec), dtype=np.int64)
            for j, (off, n) in enumerate(zip(self.offsets, self.nvec, strict=True)):
                choices = np.flatnonzero(mask_row[off : off + n])
                out[j] = choices[int(rng.integers(len(choices)))]
            return out
        d = self.act_dims[i]
        out = np.zeros(self.act_dim, dtype=np.float32)
        out[:d] = rng.uniform(self.act_low[i, :d], self.act_high[i, :d])
        return out

    def zero_actions(self) -> np.ndarray:
        return np.zeros((len(self.names), *self.act_shape), dtype=self.act_dtype)

    def check(self, i: int, agent: str, action) -> object:
        """Agent ``i``'s action in its own space, normalised; else InvalidActionError."""
        space = self.groups[self.kind[i]].action
        if self.type is spaces.Discrete:
            if isinstance(action, np.ndarray) and action.shape == () and action.dtype.kind in "iu":
                action = action.item()
            if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)):
                raise InvalidActionError(
                    f"agent {agent!r} got action {action!r} of type {type(action).__name__}; "
                    f"expected an integer in 0..{space.n - 1}"
                )
            if not 0 <= action < space.n:
                raise InvalidActionError(
                    f"agent {agent!r} got action {action}; the action space is "
                    f"Discrete({space.n}), valid actions are 0..{space.n - 1}"
                )
            return int(action)
        try:
            a = np.asarray(action)
        except ValueError as exc:
            raise InvalidActionError(f"agent {agent!r} got action {action!r}: {exc}") from None
        if a.shape != space.shape:
            raise InvalidActionError(
                f"agent {agent!r} got an action of shape {a.shape}; {space} needs {space.shape}"
            )
        if self.type is spaces.MultiDiscrete:
            if a.dtype.kind not in "iu" or (a < 0).any() or (a >= space.nvec).any():
                raise InvalidActionError(
                    f"agent {agent!r} got action {action!r}; expected ints with 0 <= a < "
                    f"{space.nvec.tolist()}"
                )
            return a.astype(np.int64)
        if a.dtype.kind not in "iuf" or not np.isfinite(a).all():
            raise InvalidActionError(f"agent {agent!r} got action {action!r}: not finite numbers")
        a = a.astype(space.dtype, copy=False)  # compared as Box.contains does: 0.7 in Box(0, 0.7)
        if (a < space.low).any() or (a > space.high).any():
            raise InvalidActionError(
                f"agent {agent!r} got action {action!r}, outside {space} (actions are not "
                "clipped)"
            )
        out = np.zeros(self.act_dim, dtype=np.float32)
        out[: a.shape[0]] = a
        return out

    def unpad(self, i: int, action):
        """Agent ``i``'s action from its (padded) row, as its own space has it: a copy,
        never a view of the batch's buffer (a model may keep it)."""
        if self.type is spaces.Box:
            return action[: self.act_dims[i]].copy()
        if self.type is spaces.MultiDiscrete:
            return action.copy()
        return action

    # ---- the batch's spaces -------------------------------------------------------------
    def batch_observation_space(self) -> spaces.Box:
        """One ``Box`` for every row: a group's own, or the padded union."""
        if len(self.groups) == 1:
            return self.groups[0].observation
        low = np.zeros(self.obs_dim, dtype=np.float32)
        high = np.zeros(self.obs_dim, dtype=np.float32)
        for g in self.groups:
            d = g.observation.shape[0]
            low[:d] = np.minimum(low[:d], g.observation.low)
            high[:d] = np.maximum(high[:d], g.observation.high)
        return spaces.Box(low, high, dtype=np.float32)

    def batch_action_space(self) -> spaces.Space:
        """One action space for every row (padded: see the module docstring)."""
        if len(self.groups) == 1:
            return self.groups[0].action
        if self.type is spaces.Discrete:
            return spaces.Discrete(self.mask_dim)
        if self.type is spaces.MultiDiscrete:
            return spaces.MultiDiscrete(self.nvec)
        return spaces.Box(self.act_low.min(axis=0), self.act_high.max(axis=0), dtype=np.float32)
