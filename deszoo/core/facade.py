"""PettingZoo's dict API as a thin layer over an env's array step.

:class:`DictAPI` wraps an env that speaks the array protocol (:mod:`deszoo.core.arrays`), as
PettingZoo's conversions wrap an env, and uses its public surface only: ``step(actions)``
checks the dict (agent names, actions inside the action spaces), writes one action per row
and calls ``env.step_arrays``; what it returns is read back from the env's arrays: fresh
copies, so what a caller keeps never changes under it. It owns the caches it needs (each
agent's row and spaces, each group's widths).

:class:`~deszoo.core.env.SimPyParallelEnv` serves ``reset``, ``step``,
``observation_space`` and ``action_space`` through one of these.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from deszoo.core.invalid import legal_actions
from deszoo.errors import InvalidActionError, MissingActionError, UnknownAgentError

__all__ = ["DictAPI"]


class DictAPI:
    """``reset``, ``step`` and the spaces of PettingZoo's ``ParallelEnv`` over ``env``.

    Args:
        env: the array env (``rows``, ``possible_agents``, ``agents``, the arrays,
            ``reset_arrays``, ``step_arrays``, ``sim``, ``num_invalid``).
        mask_in_obs: observations as ``{"observation", "action_mask"}`` dicts.
        strict: ``invalid_action="raise"`` (a missing action raises here, an action for an
            agent that has left raises ``UnknownAgentError``).
    """

    def __init__(self, env: Any, *, mask_in_obs: bool, strict: bool):
        self.env = env
        rows = env.rows
        self._rows = rows
        self._names = list(env.possible_agents)
        self._index = {a: i for i, a in enumerate(self._names)}
        self._mask_in_obs = mask_in_obs
        self._strict = strict
        self._discrete = rows.type is spaces.Discrete
        # Box actions have no mask: no "action_mask" in infos (PettingZoo's tests would
        # pass it to Box.sample, which takes none).
        self._masked = rows.type is not spaces.Box
        # Per row: the size of its Discrete space (the quick action check).
        self._n_actions = rows.n.tolist() if self._discrete else []
        # Per group: its rows and widths; per agent: its (cached) spaces.
        self._obs_widths: list[tuple[int, int, int]] = []
        self._mask_widths: list[tuple[int, int, int]] = []
        self._spaces: dict[str, tuple[spaces.Space, spaces.Space]] = {}
        lo = 0
        for g in rows.groups:
            hi = lo + len(g.names)
            width = int(g.action.n) if self._discrete else rows.mask_dim
            self._obs_widths.append((lo, hi, int(g.observation.shape[0])))
            self._mask_widths.append((lo, hi, width))
            obs_space = g.observation
            if mask_in_obs:
                obs_space = spaces.Dict({
                    "observation": g.observation,
                    "action_mask": spaces.Box(0, 1, (width,), dtype=np.int8),
                })
            for a in g.names:
                self._spaces[a] = (obs_space, g.action)
            lo = hi
        # One group, or groups of equal widths: the arrays are copied whole.
        self._one_width = (len({d for _, _, d in self._obs_widths}) == 1 and rows.obs_dim
                           == self._obs_widths[0][2] and len({k for _, _, k in self._mask_widths})
                           == 1 and rows.mask_dim == self._mask_widths[0][2])
        self._listed: tuple[list[str], set[str]] = ([], set())  # env.agents, as a set

    # ---- the spaces --------------------------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Space:
        return self._spaces_of(agent)[0]

    def action_space(self, agent: str) -> spaces.Space:
        return self._spaces_of(agent)[1]

    def _spaces_of(self, agent: str) -> tuple[spaces.Space, spaces.Space]:
        try:
            return self._spaces[agent]
        except (KeyError, TypeError):
            raise UnknownAgentError(
                f"unknown agent {agent!r}; possible agents: {self._names}"
            ) from None

    # ---- reset and step ----------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, dict]]:
        env = self.env
        env.reset_arrays(seed)
        names = env.agents
        rows, obs, masks = self._copies(names)
        return self._obs_dict(names, rows, obs, masks), self._info_dict(names, rows, masks)

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """One step of every listed agent (the env must have a running episode)."""
        if not isinstance(actions, dict):
            raise InvalidActionError(
                f"actions must be a dict from agent name to action, got {type(actions).__name__}"
            )
        env = self.env
        names = env.agents
        acts, given = self._actions_from(actions, names)
        if given == len(names):  # hot path: every listed agent (so every deciding one) has one
            env.step_arrays(acts)
        else:
            env.step_arrays(acts, self._missing(actions))
        rows, obs, masks = self._copies(names)
        # (zip(strict=False): names and rows have one length by construction)
        if type(rows) is range:  # every agent listed: row i is agent i
            rew = dict(zip(names, env.rew_buf.tolist(), strict=False))
        else:
            rew = dict(zip(names, env.rew_buf[rows].tolist(), strict=False))
        if env.agents is not names:  # someone left or the episode ended: flags may be set
            term = self._flags(names, rows, env.term_buf)
            trunc = self._flags(names, rows, env.trunc_buf)
        else:  # hot path: the env rebuilds its agents list whenever anyone leaves or ends
            term = dict.fromkeys(names, False)
            trunc = dict.fromkeys(names, False)
        return (self._obs_dict(names, rows, obs, masks), rew, term, trunc,
                self._info_dict(names, rows, masks))

    # ---- actions in -------------------------------------------------------------------
    def _actions_from(self, actions: dict, listed: list[str]) -> tuple[Any, int]:
        """One action per row (the no-op for rows without one): a list of ints for
        ``Discrete`` actions, else an array; and how many listed agents have one."""
        index, rows, n_of = self._index, self._rows, self._n_actions
        discrete = self._discrete
        acts = [0] * len(self._names) if discrete else rows.zero_actions()
        on = self._listed_set(listed) if len(listed) != len(self._names) else None
        given = 0  # (counted only when some agents are not listed: else every action counts)
        for name, action in actions.items():
            i = index.get(name)
            if i is None:
                raise UnknownAgentError(
                    f"action for unknown agent {name!r}; possible agents: {self._names}"
                )
            if not (discrete and type(action) is int and 0 <= action < n_of[i]):
                action = rows.check(i, name, action)  # normalised, or InvalidActionError
            if on is not None and name not in on:
                if self._strict:
                    raise UnknownAgentError(
                        f"action for agent {name!r}, which has left the episode; live "
                        f"agents: {listed}"
                    )
                continue  # lenient: an action for an agent that has left is ignored
            acts[i] = action
            if on is not None:
                given += 1
        return acts, len(actions) if on is None else given

    def _listed_set(self, listed: list[str]) -> set[str]:
        """``listed`` (the env's agents) as a set, built once per roster."""
        seen, names = self._listed
        if seen is not listed:
            names = set(listed)
            self._listed = (listed, names)
        return names

    def _missing(self, actions: dict) -> np.ndarray | None:
        """The rows without an action, if an agent at a decision point has none (strict
        mode: ``MissingActionError``)."""
        env = self.env
        names = self._names
        for i in np.flatnonzero(env.needs_buf).tolist():
            if names[i] not in actions:
                if self._strict:
                    raise MissingActionError(
                        f"agent {names[i]!r} is at a decision point and needs an action; "
                        f"valid actions: {legal_actions(env.mask_buf, i)}"
                    )
                return np.array([a not in actions for a in names])
        return None

    # ---- results out ------------------------------------------------------------------
    def _copies(self, names: list[str]) -> tuple[Any, Any, Any]:
        """The rows of ``names`` and fresh copies of their observations and masks, each
        cut to its group's widths, indexed by row: ``(rows, obs, masks)``."""
        env = self.env
        if len(names) == len(self._names) and self._one_width:
            # hot path: every agent listed, one row width: one copy of each array, and
            # row i of a copy is agent i's (indexing a row is cheaper than iterating)
            return range(len(names)), env.obs_buf.copy(), env.mask_buf.copy()
        index = self._index
        rows = [index[a] for a in names]
        obs: dict[int, np.ndarray] = {}
        masks: dict[int, np.ndarray] = {}
        obs_buf, mask_buf = env.obs_buf, env.mask_buf
        for (lo, hi, d), (_, _, k) in zip(self._obs_widths, self._mask_widths, strict=True):
            block_obs = obs_buf[lo:hi, :d].copy()
            block_masks = mask_buf[lo:hi, :k].copy()
            for i in range(lo, hi):
                obs[i], masks[i] = block_obs[i - lo], block_masks[i - lo]
        return rows, obs, masks

    @staticmethod
    def _flags(names: list[str], rows: Any, flags: np.ndarray) -> dict:
        values = flags.tolist() if type(rows) is range else flags[rows].tolist()
        return dict(zip(names, values, strict=True))

    def _obs_dict(self, names: list[str], rows: Any, obs: Any, masks: Any) -> dict[str, Any]:
        if self._mask_in_obs:  # the mask twice: the caller may change one copy
            return {a: {"observation": obs[i], "action_mask": masks[i].copy()}
                    for a, i in zip(names, rows, strict=True)}
        return {a: obs[i] for a, i in zip(names, rows, strict=False)}

    def _info_dict(self, names: list[str], rows: Any, masks: Any) -> dict[str, dict]:
        # The same keys with the same types on every step (TorchRL builds a spec from them).
        env = self.env
        now = float(env.sim.now)  # (a float even at time 0)
        needs = env.needs_buf.tolist()  # (at a decision point)
        if not env.num_invalid:  # hot path: no invalid action this episode
            out = {a: {"sim_time": now, "needs_action": needs[i], "action_mask": masks[i],
                       "invalid_action": False, "invalid_count": 0}
                   for a, i in zip(names, rows, strict=False)}
        else:
            invalid = env.invalid_buf.tolist()
            counts = env.invalid_count.tolist()
            out = {a: {"sim_time": now, "needs_action": needs[i], "action_mask": masks[i],
                       "invalid_action": invalid[i], "invalid_count": counts[i]}
                   for a, i in zip(names, rows, strict=True)}
        if not self._masked:
            for info in out.values():
                del info["action_mask"]
        return out
