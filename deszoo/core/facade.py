"""PettingZoo's dict API as a thin view over the per-agent arrays.

``step(actions)`` checks the dict (agent names, actions inside the action spaces), writes one
action per row and runs the array step (:mod:`deszoo.core.stepper`); what it returns is read
back from the arrays: fresh copies, so what a caller keeps never changes under it.

The class is a mixin of :class:`~deszoo.core.env.SimPyParallelEnv`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from deszoo._links import doc
from deszoo.errors import (
    InvalidActionError,
    MissingActionError,
    ResetNeededError,
    UnknownAgentError,
)

__all__ = ["DictFacade"]


class DictFacade:
    """``reset``, ``step``, the spaces and ``close`` (see the module docstring)."""

    def observation_space(self, agent: str) -> spaces.Space:
        self._check_agent_name(agent)
        return self._obs_spaces[self.rows.kind[self._index[agent]]]  # cached, per group

    def action_space(self, agent: str) -> spaces.Space:
        self._check_agent_name(agent)
        return self._group_of[agent].action

    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, Any], dict[str, dict]]:
        self.reset_arrays(seed)
        names = self.agents
        rows, obs, masks = self._copies(names)
        return self._obs_dict(names, rows, obs, masks), self._info_dict(names, rows, masks)

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if self.sim is None or not self.agents:
            raise ResetNeededError(
                f"{self.metadata['name']}: step() called " + self._not_running()
                + "; call reset() first" + self._ended_hint()
            )
        if not isinstance(actions, dict):
            raise InvalidActionError(
                f"actions must be a dict from agent name to action, got {type(actions).__name__}"
            )
        names = self.agents
        self._step(self._actions_from(actions, names), self._missing(actions))
        rows, obs, masks = self._copies(names)
        # (zip(strict=False): names and rows have one length by construction)
        if type(rows) is range:  # every agent listed: row i is agent i
            rew = dict(zip(names, self.rew_buf.tolist(), strict=False))
        else:
            rew = dict(zip(names, self.rew_buf[rows].tolist(), strict=False))
        if self._flags_set:
            term = self._flags(names, rows, self.term_buf)
            trunc = self._flags(names, rows, self.trunc_buf)
        else:  # hot path: nobody ended this step
            term = dict.fromkeys(names, False)
            trunc = dict.fromkeys(names, False)
        return (self._obs_dict(names, rows, obs, masks), rew, term, trunc,
                self._info_dict(names, rows, masks))

    def close(self) -> None:
        self.sim = None
        self._pending = {}
        self._closed = True
        canvas = self.__dict__.pop("_canvas", None)  # the rgb_array figure, if one was drawn
        if canvas is not None:
            canvas.close()

    # ---- actions in -------------------------------------------------------------------
    def _actions_from(self, actions: dict, listed: list[str]) -> Any:
        """One action per row (the no-op for rows without one): a list of ints for
        ``Discrete`` actions, else an array."""
        index, rows, n_of = self._index, self.rows, self._n_actions
        discrete = self._discrete
        acts = [0] * len(self.possible_agents) if discrete else rows.zero_actions()
        on = self._listed if len(listed) != len(self.possible_agents) else None
        for name, action in actions.items():
            i = index.get(name)
            if i is None:
                raise UnknownAgentError(
                    f"action for unknown agent {name!r}; possible agents: "
                    f"{self.possible_agents}"
                )
            if not (discrete and type(action) is int and 0 <= action < n_of[i]):
                action = rows.check(i, name, action)  # normalised, or InvalidActionError
            if on is not None and name not in on:
                if self._strict:
                    raise UnknownAgentError(
                        f"action for agent {name!r}, which has left the episode; live "
                        f"agents: {self.agents}"
                    )
                continue  # lenient: an action for an agent that has left is ignored
            acts[i] = action
        return acts

    def _missing(self, actions: dict) -> np.ndarray | None:
        """The rows without an action, if an agent at a decision point has none (strict
        mode: ``MissingActionError``)."""
        names = self.possible_agents
        for i in self._pending:
            if names[i] not in actions:
                if self._strict:
                    raise MissingActionError(
                        f"agent {names[i]!r} is at a decision point and needs an action; "
                        f"valid actions: {self._legal(i)}"
                    )
                return np.array([a not in actions for a in names])
        return None

    # ---- results out ------------------------------------------------------------------
    def _copies(self, names: list[str]) -> tuple[Any, Any, Any]:
        """The rows of ``names`` and fresh copies of their observations and masks, each
        cut to its group's widths, indexed by row: ``(rows, obs, masks)``."""
        if len(names) == len(self.possible_agents) and self._one_width:
            # hot path: every agent listed, one row width: one copy of each array, and
            # row i of a copy is agent i's (indexing a row is cheaper than iterating)
            return range(len(names)), self.obs_buf.copy(), self.mask_buf.copy()
        index = self._index
        rows = [index[a] for a in names]
        obs: dict[int, np.ndarray] = {}
        masks: dict[int, np.ndarray] = {}
        for (lo, hi, d), (_, _, k) in zip(self._obs_widths, self._mask_widths, strict=True):
            block_obs = self.obs_buf[lo:hi, :d].copy()
            block_masks = self.mask_buf[lo:hi, :k].copy()
            for i in range(lo, hi):
                obs[i], masks[i] = block_obs[i - lo], block_masks[i - lo]
        return rows, obs, masks

    @staticmethod
    def _flags(names: list[str], rows: Any, flags: np.ndarray) -> dict:
        values = flags.tolist() if type(rows) is range else flags[rows].tolist()
        return dict(zip(names, values, strict=True))

    def _obs_dict(self, names: list[str], rows: Any, obs: Any, masks: Any) -> dict[str, Any]:
        if self.mask_in_obs:  # the mask twice: the caller may change one copy
            return {a: {"observation": obs[i], "action_mask": masks[i].copy()}
                    for a, i in zip(names, rows, strict=True)}
        return {a: obs[i] for a, i in zip(names, rows, strict=False)}

    def _info_dict(self, names: list[str], rows: Any, masks: Any) -> dict[str, dict]:
        # The same keys with the same types on every step (TorchRL builds a spec from them).
        now = float(self.sim.now)  # (a float even at time 0)
        pending = self._pending
        if not self._any_invalid:  # hot path: no invalid action this episode
            return {a: {"sim_time": now, "needs_action": i in pending, "action_mask": masks[i],
                        "invalid_action": False, "invalid_count": 0}
                    for a, i in zip(names, rows, strict=False)}
        invalid = self.invalid_buf.tolist()
        counts = self.invalid_count.tolist()
        return {a: {"sim_time": now, "needs_action": i in pending, "action_mask": masks[i],
                    "invalid_action": invalid[i], "invalid_count": counts[i]}
                for a, i in zip(names, rows, strict=True)}

    # ---- checks -----------------------------------------------------------------------
    def _check_agent_name(self, agent: str) -> None:
        if agent not in self._index:
            raise UnknownAgentError(
                f"unknown agent {agent!r}; possible agents: {self.possible_agents}"
            )

    def _ended_hint(self) -> str:
        if self.sim is None or self._closed:
            return ""
        # The usual caller: a wrapper that never saw the end (SuperSuit 3.11's black_death_v3
        # reports an episode done only when every agent is terminated *and* truncated).
        return (" (if a wrapper kept stepping: SuperSuit 3.11's black_death_v3 never reports "
                "the end of an episode; drop it, deszoo's black_death=True, the default, keeps "
                f"every agent listed already; see {doc('compatibility.md#agents-that-leave')})")

    def _not_running(self) -> str:
        if self._closed:
            return "after close()"
        return "before reset()" if self.sim is None else "after the episode ended"
