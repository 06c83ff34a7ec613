"""Any PettingZoo ``ParallelEnv`` on the vector backends, through its dict API.

The backends step envs through the bridge's array API (``reset_arrays``, ``step_arrays``
and per-agent arrays that become views of the batch buffers). A deszoo
:class:`~deszoo.core.SimPyParallelEnv` has it natively; :class:`ParallelEnvArrays` gives it
to any other ``ParallelEnv`` by calling its ``reset`` and ``step`` and copying the dicts into
the arrays. Agents are rows in ``possible_agents`` order, with the padded layout of
:mod:`deszoo.core.groups` for agents of different spaces.

What batches:

=================  ======================================================================
Observations       ``Box`` (any shape, flattened), ``Discrete`` (one-hot), or PettingZoo's
                   ``Dict({"observation": ..., "action_mask": ...})`` (the mask is used)
Actions            ``Discrete``, ``MultiDiscrete`` or flat ``Box``, one type for all agents
Masks              ``obs[agent]["action_mask"]`` or ``infos[agent]["action_mask"]`` when
                   there is one; else every action of the agent's own space is allowed.
                   A masked-out action (or one past the agent's own ``Discrete`` space,
                   where kinds are padded) is replaced by a random legal one and flagged in
                   ``invalid_action``, as deszoo's envs do by default
Deciding agents    ``infos[agent]["needs_action"]`` when there is one; else every agent in
                   ``env.agents`` that has a legal action (a turn-based game's waiting
                   player has none: its row gets the no-op mask)
Agents that leave  their rows are dead (zeros, no-op mask) until the episode ends
Global state       ``env.state()`` flattened, for ``make_vec(..., state=True)``, when the
                   env has a ``Box`` ``state_space``
Attributes         ``get_attr``, ``set_attr``, ``call`` and ``render`` reach the user's env
=================  ======================================================================

Anything else (``Tuple`` or other ``Dict`` observations, ``Text``, ``Graph``) raises
:class:`~deszoo.errors.ConfigError` when the vector env is built.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from deszoo.core.arrays import allocate
from deszoo.core.groups import AgentRows, Group
from deszoo.errors import ConfigError

__all__ = ["ParallelEnvArrays", "ArrayFactory"]


def _flat_box(space: spaces.Space, who: str) -> tuple[spaces.Box, str]:
    """The flat ``Box`` a space's values are written as, and how (``"box"``, ``"onehot"``)."""
    if isinstance(space, spaces.Box):
        low = np.asarray(space.low, dtype=np.float32).reshape(-1)
        high = np.asarray(space.high, dtype=np.float32).reshape(-1)
        return spaces.Box(low, high, dtype=np.float32), "box"
    if isinstance(space, spaces.Discrete):
        n = int(space.n)
        return spaces.Box(0.0, 1.0, (n,), dtype=np.float32), "onehot"
    raise ConfigError(
        f"{who}: observation space {space} cannot be batched; deszoo's vector backends take "
        "Box, Discrete or PettingZoo's Dict({'observation', 'action_mask'}) observations"
    )


def _shape(value: Any) -> str:
    """What a value is, in a message: a tuple's item types, else its type."""
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} ({', '.join(type(v).__name__ for v in value)})"
    return f"a {type(value).__name__}"


class ParallelEnvArrays:
    """A PettingZoo ``ParallelEnv`` behind the bridge's array API (see the module
    docstring)."""

    def __init__(self, env: Any):
        from pettingzoo import AECEnv

        if isinstance(env, AECEnv):
            raise ConfigError(
                f"{type(env).__name__} is an AEC env; vector envs step every agent at once: "
                "wrap it with pettingzoo.utils.conversions.aec_to_parallel"
            )
        for attr in ("possible_agents", "reset", "step", "observation_space", "action_space"):
            if not hasattr(env, attr):
                raise ConfigError(
                    f"{type(env).__name__} is not a PettingZoo ParallelEnv (no {attr!r})"
                )
        self.env = env
        self.metadata = getattr(env, "metadata", {}) or {}
        self._name = name = self.metadata.get("name", type(env).__name__)
        self.possible_agents = list(env.possible_agents)
        if not self.possible_agents:
            raise ConfigError(f"{name}: possible_agents is empty")
        self._how: list[str] = []
        self._masked: list[bool] = []
        self._start: list[int] = []  # a Discrete observation's first value
        specs = []
        for agent in self.possible_agents:
            space = env.observation_space(agent)
            masked = isinstance(space, spaces.Dict) and set(space.spaces) == {
                "observation", "action_mask"}
            if masked:
                space = space["observation"]
            elif isinstance(space, spaces.Dict):
                raise ConfigError(
                    f"{name}: agent {agent!r} observes a Dict {space}; only PettingZoo's "
                    "{'observation', 'action_mask'} dicts can be batched"
                )
            box, how = _flat_box(space, f"{name}: agent {agent!r}")
            action = env.action_space(agent)
            if not isinstance(action, (spaces.Discrete, spaces.MultiDiscrete, spaces.Box)):
                raise ConfigError(
                    f"{name}: agent {agent!r} has action space {action}; deszoo's vector "
                    "backends take Discrete, MultiDiscrete or flat Box actions"
                )
            if np.any(getattr(action, "start", 0) != 0):
                raise ConfigError(f"{name}: {type(action).__name__} actions must start at 0 "
                                  f"({action})")
            specs.append((box, action))
            self._how.append(how)
            self._start.append(int(space.start) if how == "onehot" else 0)
            self._masked.append(masked)
        # Consecutive agents with equal spaces form a group (a kind).
        groups: list[Group] = []
        for agent, (box, action) in zip(self.possible_agents, specs, strict=True):
            last = groups[-1] if groups else None
            if last is not None and last.observation == box and last.action == action:
                last.names.append(agent)
            else:
                groups.append(Group([agent], box, action))
        self.rows = AgentRows(groups, name)
        n, rows = len(self.possible_agents), self.rows
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        allocate(self, rows)
        self._full = np.stack([rows.full_mask(i) for i in range(n)])
        self._noop = rows.noop_mask()
        self._rng = np.random.default_rng()
        self.episode_over = True
        self.num_steps = 0
        self.num_events = 0
        self._time = 0.0
        # The env's global state, flattened, if it has a Box one (make_vec(state=True)).
        space = getattr(env, "state_space", None)
        self.state_space = (_flat_box(space, name)[0] if isinstance(space, spaces.Box)
                            else None)
        self._ready = True  # from now on, attributes it lacks are the user env's

    # The vector env's get_attr, set_attr, call and render reach the user's env for every
    # name this adapter does not have itself.
    def __getattr__(self, name: str) -> Any:
        env = self.__dict__.get("env")
        if env is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(env, name)

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        if d.get("_ready") and name not in d and not hasattr(type(self), name):
            setattr(d["env"], name, value)
        else:
            object.__setattr__(self, name, value)

    # ---- what the backends read ------------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Space:
        return self.rows.groups[self.rows.kind[self._index[agent]]].observation

    def action_space(self, agent: str) -> spaces.Space:
        return self.rows.groups[self.rows.kind[self._index[agent]]].action

    @property
    def now(self) -> float:
        """The env's ``infos[agent]["sim_time"]`` if it reports one, else its step count."""
        return self._time

    def write_state(self, out: np.ndarray) -> None:
        """The env's ``state()``, flattened, into ``out``."""
        out[:] = np.asarray(self.env.state(), dtype=np.float32).reshape(-1)

    def reset_arrays(self, seed: int | None = None) -> None:
        if seed is not None:  # the masked-out actions' replacements (apart from the env's)
            self._rng = np.random.default_rng((seed, 0x6D61736B))
        out = self.env.reset(seed=seed)
        if not (type(out) is tuple and len(out) == 2 and isinstance(out[1], dict)):
            raise TypeError(f"{self._name}.reset() returned {_shape(out)}; a PettingZoo "
                            "ParallelEnv's reset returns (observations, infos), two dicts "
                            "(PettingZoo >= 1.23)")
        obs, infos = out
        self.num_steps = 0
        self.episode_over = False
        self.rew_buf[:] = 0.0
        self.term_buf[:] = False
        self.trunc_buf[:] = False
        self.invalid_count[:] = 0
        self._absorb(obs, infos, first=True)

    def step_arrays(self, acts: np.ndarray, missing: np.ndarray | None = None) -> None:
        live = list(self.env.agents)
        rows = self.rows
        actions, replaced = {}, []
        for a in live:
            i = self._index[a]
            act = acts[i]
            if self.needs_buf[i] and not rows.legal_row(self.mask_buf[i], act):
                act = rows.fallback(i, self.mask_buf[i], self._rng)
                replaced.append(i)
            act = rows.unpad(i, act)
            actions[a] = int(act) if rows.type is spaces.Discrete else act
        out = self.env.step(actions)
        if type(out) is not tuple or len(out) != 5:
            raise TypeError(f"{self._name}.step() returned {_shape(out)}; a PettingZoo "
                            "ParallelEnv's step returns (observations, rewards, "
                            "terminations, truncations, infos)")
        obs, rew, term, trunc, infos = out
        self.num_steps += 1
        self.rew_buf[:] = 0.0
        self.term_buf[:] = False
        self.trunc_buf[:] = False
        index = self._index
        for a, r in rew.items():
            self.rew_buf[index[a]] = r
        for a, t in term.items():
            self.term_buf[index[a]] = bool(t)
        for a, t in trunc.items():
            self.trunc_buf[index[a]] = bool(t)
        self._absorb(obs, infos, first=False)
        for i in replaced:
            if not self.invalid_buf[i]:  # (unless the env flagged it itself)
                self.invalid_buf[i] = True
                self.invalid_count[i] += 1

    def _absorb(self, obs: dict, infos: dict, first: bool) -> None:
        live_now = set(self.env.agents)
        index = self._index
        self.live[:] = False
        self.needs_buf[:] = False
        self.invalid_buf[:] = False
        self.obs_buf[:] = 0.0
        self.mask_buf[:] = self._noop
        times = []
        for a, o in obs.items():
            i = index[a]
            info = infos.get(a, {}) or {}
            mask = None
            if self._masked[i]:
                mask, o = o["action_mask"], o["observation"]
            elif "action_mask" in info:
                mask = info["action_mask"]
            row = self.obs_buf[i]
            if self._how[i] == "onehot":
                row[int(o) - self._start[i]] = 1.0
            else:
                flat = np.asarray(o, dtype=np.float32).reshape(-1)
                row[: flat.shape[0]] = flat
            if a in live_now:
                self.live[i] = True
                deciding = bool(info.get("needs_action", True))
                self.needs_buf[i] = deciding
                if deciding:
                    if mask is None:
                        self.mask_buf[i] = self._full[i]
                    else:
                        m = np.asarray(mask, dtype=np.int8).reshape(-1)
                        row = self.mask_buf[i]
                        row[:] = 0
                        row[: m.shape[0]] = m
                        if not self._has_choice(row):  # nothing to decide: a no-op row
                            row[:] = self._noop
                            self.needs_buf[i] = False
            if info.get("invalid_action"):
                self.invalid_buf[i] = True
                self.invalid_count[i] += 1
            if "sim_time" in info:
                times.append(float(info["sim_time"]))
        self._time = max(times) if times else float(self.num_steps)
        self.episode_over = not live_now

    def _has_choice(self, row: np.ndarray) -> bool:
        """Whether a mask row allows an action (one of each component for MultiDiscrete)."""
        if self.rows.type is spaces.MultiDiscrete:
            return bool(np.logical_or.reduceat(row, self.rows.offsets).all())
        return bool(row.any())

    def close(self) -> None:
        self.env.close()


class ArrayFactory:
    """A picklable factory of :class:`ParallelEnvArrays` around a user's env factory."""

    def __init__(self, factory: Callable[[], Any]):
        self.factory = factory

    def __call__(self) -> ParallelEnvArrays:
        return ParallelEnvArrays(self.factory())
