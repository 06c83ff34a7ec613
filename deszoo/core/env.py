"""The SimPy-to-PettingZoo bridge.

A scenario subclasses :class:`SimPyParallelEnv`. Its model is plain SimPy (processes,
resources, no RL concepts); where an agent must decide, the model waits on an event that
the adapter hands out, and gets a *domain value* back (a job, a pool, a quantity), never
an action index::

    job = yield self.decide(i, mask, values=[None] + queue)   # action k -> values[k]

``step(actions)`` gives every pending decision its value and runs the simulation until at
least one agent waits for a decision again (all events at that instant are processed first,
so agents that decide at the same simulated time decide in the same step), or until the
episode ends. Decisions that come at a fixed interval use :meth:`SimPyParallelEnv.every`.

Semantics shared by every scenario:

=====================  =====================================================================
Agents                 One or more groups (:class:`~deszoo.core.groups.Group`): per-agent
                       observation ``Box`` and ``Discrete``, ``MultiDiscrete`` or ``Box``
                       actions (one action type per env)
Actions                ``Discrete``: action ``0`` is the no-op; ``MultiDiscrete``: all zeros;
                       ``Box``: an agent not deciding has its action ignored
Agents not deciding    Live agents that are not at a decision point have the no-op mask
                       and ``needs_action`` False; their actions are ignored.
Observations           Flat ``Box(float32)`` per group; ``mask_in_obs=True`` gives
                       PettingZoo's ``{"observation", "action_mask"}`` dicts instead
Rewards                Accumulated over the simulated interval between two steps.
``infos[agent]``       ``sim_time`` (clock after the step), ``needs_action`` (bool),
                       ``action_mask`` (``int8``), ``invalid_action`` (bool) and
                       ``invalid_count`` (int, this episode): the same keys every step
Termination            When the model ends the episode, or the event queue runs dry.
Truncation             ``max_time`` (simulated) or ``max_steps`` (env steps) reached.
Leaving agents         ``self.remove_agent(i)`` terminates one agent; it leaves ``agents``
                       (with ``black_death=True`` it stays listed, observing zeros, until
                       the episode ends).
Final observations     An agent's last step returns its real final observation; after
                       that (in the arrays) a departed agent's row is zeros with the
                       no-op mask.
Seeding                ``reset(seed=s)`` builds a new ``simpy.Environment`` and a new
                       ``numpy.random.Generator`` from ``s``. ``reset()`` on a seeded env
                       draws the next episode's generator from the env's own seed sequence
                       (reproducible autoresets); on a never-seeded env it draws OS entropy.
Pickling               An env pickles as its constructor arguments; the unpickled copy needs
                       ``reset`` (a running SimPy process is a generator and cannot pickle).
Bad input              Typed errors from :mod:`deszoo.errors`.
=====================  =====================================================================

Invalid actions (``invalid_action``, see ``docs/bridge.md``):

* ``"random"`` (default): a masked-out action of an agent at a decision point is replaced
  by a uniformly random legal action (drawn from a generator of its own, seeded from the
  episode's seed, so trajectories stay reproducible and legal play is unchanged), flagged
  in ``infos[agent]["invalid_action"]``, counted in ``infos[agent]["invalid_count"]``
  (per episode) and charged ``invalid_penalty``. A missing action of a deciding agent is
  treated the same way. Actions of agents that are not deciding, or have left, are
  ignored. So every decision is taken and the clock always moves, whatever the policy
  sends, and a policy that ignores the mask does no better than the random masked policy.
* ``"raise"``: strict, for debugging: a masked-out action raises ``MaskedActionError``
  (also a non-no-op action of an agent that is not deciding), a missing one
  ``MissingActionError``, an action for an agent that has left ``UnknownAgentError``.

Actions outside the action space always raise ``InvalidActionError`` (``Box`` actions are
never clipped).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import numpy as np
import simpy
from gymnasium import spaces
from pettingzoo import ParallelEnv

from deszoo.core.arrays import allocate
from deszoo.core.config import check_seed
from deszoo.core.groups import AgentRows, Group
from deszoo.core.memory import check_fits, env_bytes
from deszoo.core.params import COMMON, Config, Param, check_all
from deszoo.errors import (
    ConfigError,
    InvalidActionError,
    MaskedActionError,
    MissingActionError,
    ResetNeededError,
    UnknownAgentError,
)

__all__ = ["SimPyParallelEnv", "NOOP", "COMMON_PARAMS"]

NOOP = 0
_INF = float("inf")

COMMON_PARAMS = COMMON  # the bridge's parameters (see deszoo.core.params)


def _rebuild(cls: type, kwargs: dict[str, Any]) -> SimPyParallelEnv:
    return cls(**kwargs)


def _max_cycles_alias(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Accept PettingZoo's ``max_cycles`` as another name for ``max_steps``."""
    if "max_cycles" not in kwargs:
        return kwargs
    kwargs = dict(kwargs)
    cycles = kwargs.pop("max_cycles")
    if "max_steps" in kwargs and kwargs["max_steps"] != cycles:
        raise ConfigError(
            f"{name}: max_cycles={cycles!r} and max_steps={kwargs['max_steps']!r} disagree; "
            "they are two names of one limit, give one"
        )
    kwargs["max_steps"] = cycles
    return kwargs


class SimPyParallelEnv(ParallelEnv):
    """Base class: a SimPy model as a PettingZoo ``ParallelEnv``.

    A scenario sets ``metadata["name"]``, ``params`` (each parameter once:
    :class:`~deszoo.core.params.Param` with its default, check and description) and
    ``presets``, and implements:

    * :meth:`_setup`: the agents, as one :class:`~deszoo.core.groups.Group` or a list;
    * :meth:`_build`: create the model on ``self.sim`` with ``self.rng`` and ``self.p``;
    * :meth:`_observe_all` (every agent at once) or :meth:`_observe` (one agent);
    * optionally :meth:`_flush` (time-integrated rewards) and :meth:`_render_text`.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["human", "ansi"], "name": "simpy_env"}
    params: ClassVar[dict[str, Param]] = {}
    presets: ClassVar[dict[str, dict[str, Any]]] = {"default": {}}

    def __init__(
        self,
        render_mode: str | None = None,
        preset: str = "default",
        mask_in_obs: bool = False,
        **kwargs: Any,
    ):
        name = self.metadata["name"]
        modes = self.metadata["render_modes"]
        if render_mode is not None and render_mode not in modes:
            raise ConfigError(
                f"{name}: render_mode={render_mode!r} is not supported; valid: None or one "
                f"of {modes}"
            )
        if preset not in self.presets:
            raise ConfigError(
                f"{name}: unknown preset {preset!r}; valid presets: {sorted(self.presets)}"
            )
        if not isinstance(mask_in_obs, (bool, np.bool_)):
            raise ConfigError(f"{name}: mask_in_obs={mask_in_obs!r} must be True or False")
        kwargs = _max_cycles_alias(name, kwargs)
        declared = self.all_params()
        unknown = sorted(set(kwargs) - set(declared))
        if unknown:
            raise ConfigError(
                f"{name}: unknown argument(s) {unknown}; valid arguments: render_mode, "
                f"preset, mask_in_obs, max_cycles, {', '.join(sorted(declared))}"
            )
        self.render_mode = render_mode
        self.mask_in_obs = bool(mask_in_obs)
        self._kwargs = {
            "render_mode": render_mode, "preset": preset, "mask_in_obs": self.mask_in_obs,
            **kwargs,
        }
        self.config: dict[str, Any] = {
            **{k: p.default for k, p in declared.items()}, **self.presets[preset], **kwargs
        }
        if self.config["invalid_action"] == "noop":
            raise ConfigError(
                f"{name}: invalid_action='noop' was removed: it left the agent waiting, which "
                "froze simulated time; use 'random' (the default: a random legal action, "
                "flagged in infos) or 'raise'"
            )
        check_all(name, declared, self.config)
        self.p = Config(self.config)  # what the model reads: self.p.n_machines
        self._strict = self.config["invalid_action"] == "raise"
        self._black_death = bool(self.config["black_death"])

        groups = self._setup()
        rows = AgentRows([groups] if isinstance(groups, Group) else list(groups), name)
        n = len(rows.names)
        check_fits(name, env_bytes(n, rows.obs_dim, rows.mask_dim),
                   f"{n} agents, observations of {rows.obs_dim} floats")
        self.rows = rows
        self.groups = rows.groups
        self.possible_agents: list[str] = list(rows.names)
        self.agents: list[str] = []
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        self._group_of = {a: rows.groups[k] for a, k in zip(rows.names, rows.kind, strict=True)}
        if self.mask_in_obs and rows.type is spaces.Box:
            raise ConfigError(f"{name}: mask_in_obs needs Discrete or MultiDiscrete actions")
        self._obs_spaces: dict[int, spaces.Space] = {}
        for k, g in enumerate(rows.groups):
            if self.mask_in_obs:
                width = rows.mask_dim if rows.type is spaces.MultiDiscrete else g.action.n
                self._obs_spaces[k] = spaces.Dict({
                    "observation": g.observation,
                    "action_mask": spaces.Box(0, 1, (int(width),), dtype=np.int8),
                })
            else:
                self._obs_spaces[k] = g.observation
        # Kept for scenarios and tools that knew one space: the first group's.
        self._box = rows.groups[0].observation
        self._discrete = rows.type is spaces.Discrete
        if self._discrete:
            self.n_actions = int(rows.mask_dim)
        n = len(self.possible_agents)
        # Per-agent state lives in arrays so vector backends can adopt them (core/arrays.py).
        allocate(self, rows)
        self._gone = np.zeros(n, dtype=bool)  # left, but listed until the end (black_death)
        self._noop_mask = rows.noop_mask()
        self._arange = np.arange(n)
        self.sim: simpy.Environment | None = None
        self.rng: np.random.Generator | None = None
        self._seed_seq: np.random.SeedSequence | None = None
        self._episode_seq: np.random.SeedSequence | None = None
        self._fallback_rng: np.random.Generator | None = None
        self._pending: dict[int, tuple[simpy.Event, Any]] = {}
        self._roster_changed = False  # an agent left or the episode started: rebuild agents
        self._any_left = False  # an agent left this episode
        self._masked: set[int] = set()  # rows whose mask decide() set since the last reset
        self._over = True
        self._closed = False
        self.num_steps = 0
        self.num_events = 0

    @classmethod
    def all_params(cls) -> dict[str, Param]:
        """The bridge's parameters (``max_steps``, ...) and the scenario's, in that order;
        a scenario may redeclare a bridge parameter to change its default."""
        return {**COMMON_PARAMS, **cls.params}

    # Episode limits as attributes, so ``vec.set_attr("max_steps", 100)`` works per sim (and
    # ``max_cycles``, PettingZoo's name, which its parallel_api_test sets).
    def _set_limit(self, key: str, value: Any) -> None:
        check_all(self.metadata["name"], {key: COMMON_PARAMS[key]}, {key: value})
        self.config[key] = value
        self._kwargs[key] = value

    @property
    def max_steps(self) -> int | None:
        """Truncate after this many env steps (``None``: no limit)."""
        return self.config["max_steps"]

    @max_steps.setter
    def max_steps(self, value: int | None) -> None:
        self._set_limit("max_steps", value)

    max_cycles = max_steps

    @property
    def max_time(self) -> float | None:
        """Truncate when the simulated clock would pass this time (``None``: no limit)."""
        return self.config["max_time"]

    @max_time.setter
    def max_time(self, value: float | None) -> None:
        self._set_limit("max_time", value)

    # ---- hooks for scenarios -------------------------------------------------------
    def _setup(self) -> Group | list[Group]:
        """Check what the parameters' own checks cannot (relations between them); return
        the agents as one :class:`Group` or a list of groups."""
        raise NotImplementedError

    def _build(self) -> None:
        """Create the model and start its processes on ``self.sim`` using ``self.rng``."""
        raise NotImplementedError

    def _observe_all(self, obs: np.ndarray) -> None:
        """Write every agent's observation into its row of ``obs`` (``obs_buf``), once per
        step; rows of agents that have left are zeroed afterwards by the bridge.

        Called at the end of every step and reset, after ``mask_buf`` is final for the step
        (a deciding agent's mask as the model set it, else the no-op mask), so a model may
        refine a deciding agent's mask here from the state it observes. The default calls
        :meth:`_observe` for each agent in the episode (or just leaving it).
        """
        d = self.rows.obs_dims
        for i in np.flatnonzero(self.live | (self.term_buf | self.trunc_buf) & ~self._gone):
            self._observe(int(i), obs[i, : d[i]])

    def _observe(self, i: int, out: np.ndarray) -> None:
        """Write agent ``i``'s observation into ``out`` (the convenience hook)."""
        raise NotImplementedError(
            f"{type(self).__name__} implements neither _observe_all nor _observe"
        )

    def _flush(self, until: float) -> None:
        """Book time-integrated rewards up to simulated time ``until`` (optional)."""

    def _render_text(self) -> str:
        return f"{self.metadata['name']} t={self.now:.2f}"

    # ---- API for model code -------------------------------------------------------
    @property
    def now(self) -> float:
        return 0.0 if self.sim is None else float(self.sim.now)

    def decide(
        self,
        i: int,
        mask: np.ndarray | Sequence[int] | None = None,
        *,
        values: Sequence[Any] | Callable[[Any], Any] | None = None,
    ) -> simpy.Event:
        """Event a process yields to wait for agent ``i``'s decision.

        Args:
            mask: the legal actions (``None``: all of the agent's actions).
            values: what the model receives: ``values[action]`` (a sequence indexed by the
                action), ``values(action)`` (a callable, called when the action is
                delivered), or the action itself (``None``).
        """
        if i in self._pending:
            raise RuntimeError(f"agent {self.possible_agents[i]!r} already waits for a decision")
        if not self.live[i]:
            raise RuntimeError(f"agent {self.possible_agents[i]!r} has left; it cannot decide")
        row = self.mask_buf[i]
        if mask is None:
            row[:] = self.rows.full_mask(i)
        else:
            row[:] = mask
            if not np.count_nonzero(row):
                raise RuntimeError(
                    f"model bug: agent {self.possible_agents[i]!r} got an all-zero mask"
                )
        self._masked.add(i)
        event = self.sim.event()
        self._pending[i] = (event, values)
        return event

    def every(
        self,
        dt: float,
        apply: Callable[[int, Any], None],
        *,
        mask: Callable[[int], Any] | None = None,
        values: Callable[[int], Any] | None = None,
        agents: Callable[[], Iterable[int]] | None = None,
        together: bool = True,
    ) -> simpy.Process:
        """Periodic decisions: every ``dt`` time units (from now), ``agents()`` decide.

        Args:
            apply: ``apply(i, value)`` hands agent ``i``'s decision to the model.
            mask: ``mask(i)``, agent ``i``'s mask at this round (default: all actions).
            values: ``values(i)``, what agent ``i``'s actions mean (as in :meth:`decide`).
            agents: who decides this round, in order (default: every live agent); agents
                still waiting for an earlier decision are skipped.
            together: ``True``: a round's decisions are applied together, in agent order,
                once all are taken, and the next round is due ``dt`` after that; ``False``:
                each decision is applied as it is taken, and the next round is due ``dt``
                after this one started. (They differ when an applied decision interacts
                with other events due at the next round's instant.)
        """
        if not dt > 0:
            raise ConfigError(f"decision interval dt={dt!r} must be positive")

        def clock():
            sim = self.sim
            while True:
                who = np.flatnonzero(self.live) if agents is None else agents()
                round_ = []
                for i in who:
                    i = int(i)
                    if i in self._pending:
                        continue
                    event = self.decide(i, None if mask is None else mask(i),
                                        values=None if values is None else values(i))
                    if together:
                        round_.append((i, event))
                    else:
                        event.callbacks.append(lambda ev, i=i: apply(i, ev.value))
                if round_:
                    yield sim.all_of([e for _, e in round_])
                    for i, event in round_:
                        apply(i, event.value)
                yield sim.timeout(dt)

        return self.sim.process(clock())

    def add_reward(self, i: int, value: float) -> None:
        """Add ``value`` to agent ``i``'s reward for the current step."""
        self.rew_buf[i] += value

    def end_episode(self) -> None:
        """Terminate the episode for every live agent after the current event."""
        self.term_buf[self.live | self._gone] = True
        self._over = True

    def remove_agent(self, i: int) -> None:
        """Terminate agent ``i`` alone (it leaves ``agents`` after this step).

        With ``black_death=True`` it stays in ``agents`` until the episode ends, observing
        zeros with the no-op mask, and its termination is reported then, with everyone's.
        A decision it was waiting for gets the no-op's value.
        """
        if not self.live[i]:
            return
        self.live[i] = False
        self._roster_changed = self._any_left = True
        if self._black_death:
            self._gone[i] = True
        else:
            self.term_buf[i] = True
        pending = self._pending.pop(i, None)
        if pending is not None:
            event, values = pending
            event.succeed(self._value(i, self._noop_action(), values))
        if not self.live.any():  # nobody is left to decide: the episode is over
            self.term_buf[self._gone] = True
            self._over = True

    def needs_action(self, i: int) -> bool:
        return i in self._pending

    @property
    def episode_over(self) -> bool:
        """True once the episode has terminated or truncated (``reset`` is needed)."""
        return self._over

    # ---- PettingZoo API -----------------------------------------------------------
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
        return self._obs_dict(), self._info_dict(self.agents)

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if self.sim is None or not self.agents:
            raise ResetNeededError(
                f"{self.metadata['name']}: step() called " + self._not_running()
                + "; call reset() first"
            )
        if not isinstance(actions, dict):
            raise InvalidActionError(
                f"actions must be a dict from agent name to action, got {type(actions).__name__}"
            )
        rows = self.rows
        acts = rows.zero_actions()
        given = np.zeros(len(self.possible_agents), dtype=bool)
        for name, action in actions.items():
            i = self._index.get(name)
            if i is None:
                raise UnknownAgentError(
                    f"action for unknown agent {name!r}; possible agents: "
                    f"{self.possible_agents}"
                )
            value = rows.check(i, name, action)
            if not (self.live[i] or self._gone[i]):
                if self._strict:
                    raise UnknownAgentError(
                        f"action for agent {name!r}, which has left the episode; live "
                        f"agents: {self.agents}"
                    )
                continue  # lenient: an action for an agent that has left is ignored
            acts[i] = value
            given[i] = True
        missing = None
        if not all(given[i] for i in self._pending):
            missing = ~given
            if self._strict:
                i = next(i for i in self._pending if not given[i])
                raise MissingActionError(
                    f"agent {self.possible_agents[i]!r} is at a decision point and needs "
                    f"an action; valid actions: {self._legal(i)}"
                )
        before = self.agents
        self.step_arrays(acts, missing)
        obs = self._obs_dict(before)
        rew = {a: float(self.rew_buf[self._index[a]]) for a in before}
        term = {a: bool(self.term_buf[self._index[a]]) for a in before}
        trunc = {a: bool(self.trunc_buf[self._index[a]]) for a in before}
        return obs, rew, term, trunc, self._info_dict(before)

    def render(self) -> str | np.ndarray | None:
        if self.render_mode == "rgb_array":
            return self._render_rgb()
        if self.render_mode == "ansi":
            return self._render_text()
        if self.render_mode == "human":
            if self.sim is not None:
                sys.stdout.write(self._render_text() + "\n")
            return None
        return None

    def _render_rgb(self) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} draws no rgb_array pictures")

    def close(self) -> None:
        self.sim = None
        self._pending = {}
        self._closed = True
        canvas = self.__dict__.pop("_canvas", None)  # the rgb_array figure, if one was drawn
        if canvas is not None:
            canvas.close()

    def _not_running(self) -> str:
        if self._closed:
            return "after close()"
        return "before reset()" if self.sim is None else "after the episode ended"

    def __reduce__(self):
        return (_rebuild, (type(self), dict(self._kwargs)))

    # ---- array API (used by the vector backends) ----------------------------------
    def reset_arrays(self, seed: int | None = None) -> None:
        """Start a new episode; results are in ``obs_buf``, ``mask_buf`` and ``live``."""
        if seed is not None:
            check_seed(seed, f"{self.metadata['name']}.reset")
            self._seed_seq = np.random.SeedSequence(int(seed))
        elif self._seed_seq is None:
            self._seed_seq = np.random.SeedSequence()
        self._episode_seq = self._seed_seq.spawn(1)[0]
        self.rng = np.random.default_rng(self._episode_seq)
        self._fallback_rng = None  # drawn from the episode's seed when first needed
        self.sim = simpy.Environment()
        self._pending = {}
        self._closed = False
        self._over = False
        self.num_steps = 0
        self.num_events = 0
        self.live[:] = True
        self._gone[:] = False
        self._roster_changed = True
        self._any_left = False
        self.term_buf[:] = False
        self.trunc_buf[:] = False
        self.rew_buf[:] = 0.0
        self.invalid_buf[:] = False
        self.invalid_count[:] = 0
        self._build()
        self._advance()
        self.rew_buf[:] = 0.0  # rewards before the first decision belong to no action
        self._finish_step()

    def step_arrays(self, acts: np.ndarray, missing: np.ndarray | None = None) -> None:
        """Step with one action per possible agent (row ``acts[i]``, padded).

        Actions must already be in the action space; the masks are applied here.
        ``missing`` (bool per agent, optional) marks agents that sent no action.
        """
        if self._over:
            raise ResetNeededError(f"{self.metadata['name']}: episode ended; call reset() first")
        invalid = self.invalid_buf
        invalid[:] = False
        legal = self.rows.legal(self.mask_buf, acts, self._arange)
        replaced = missing is not None or not legal.all()
        if replaced:
            acts = self._apply_invalid(acts, legal, missing)
        self.rew_buf[:] = 0.0
        self.term_buf[:] = False
        # A live episode is not truncated (and a vector env in SameStep mode reports the
        # flags of the episode it just reset in these very arrays, which it shares).
        self.trunc_buf[:] = False
        if self._pending:
            pending, self._pending = self._pending, {}
            for i, (event, values) in pending.items():
                event.succeed(self._value(i, acts[i], values))
        if replaced and invalid.any():
            self.rew_buf[invalid] -= self.config["invalid_penalty"]
        self.num_steps += 1
        self._advance()
        self._finish_step()

    def _value(self, i: int, action: Any, values: Any) -> Any:
        """What the model receives for agent ``i``'s ``action`` (see :meth:`decide`)."""
        if self._discrete:  # hot path: the common case, no padding to strip
            action = int(action)
            if values is None:
                return action
            return values(action) if callable(values) else values[action]
        action = self.rows.unpad(i, action)
        if values is None:
            return action
        return values(action) if callable(values) else values[int(action)]

    def _noop_action(self) -> Any:
        return self.rows.zero_actions()[0]

    def _apply_invalid(
        self, acts: np.ndarray, legal: np.ndarray, missing: np.ndarray | None
    ) -> np.ndarray:
        """Raise (strict mode), or replace each deciding agent's invalid or missing action."""
        if missing is not None:
            legal &= ~missing
        bad = np.flatnonzero(~legal).tolist()
        if self._strict:
            for i in bad:
                if missing is not None and missing[i]:
                    if i in self._pending:
                        raise MissingActionError(
                            f"agent {self.possible_agents[i]!r} is at a decision point and "
                            f"needs an action; valid actions: {self._legal(i)}"
                        )
                    continue
                raise MaskedActionError(
                    f"agent {self.possible_agents[i]!r} got action {acts[i]}; valid "
                    f"actions under its mask: {self._legal(i)}"
                )
        acts = acts.copy()
        for i in bad:
            if i not in self._pending:
                continue  # not deciding, or gone: its action is ignored
            if self._fallback_rng is None:
                self._fallback_rng = np.random.default_rng(self._episode_seq.spawn(1)[0])
            acts[i] = self.rows.fallback(i, self.mask_buf[i], self._fallback_rng)
            self.invalid_buf[i] = True
            self.invalid_count[i] += 1
        return acts

    # ---- internals ----------------------------------------------------------------
    def _advance(self) -> None:
        sim = self.sim
        pending = self._pending
        max_time = self.config["max_time"]
        limit = _INF if max_time is None else max_time
        count = 0
        peek, step = sim.peek, sim.step  # hot path: once per SimPy event
        while not self._over:
            t = peek()
            if pending and t > sim.now:
                break
            if t >= limit:  # (limit is at most inf, so this also catches t == inf)
                if t == _INF:  # nothing can happen any more: the model is finished
                    self._flush(sim.now)
                    self.end_episode()
                    break
                if t > limit:
                    if limit > sim.now:
                        sim.run(until=limit)
                    self._flush(limit)
                    self._truncate()
                    break
            step()
            count += 1
        else:
            self._flush(sim.now)
        if not self._over and pending:
            self._flush(sim.now)
        self.num_events += count
        max_steps = self.config["max_steps"]
        if not self._over and max_steps is not None and self.num_steps >= max_steps:
            self._truncate()

    def _truncate(self) -> None:
        self.trunc_buf[self.live | self._gone] = True
        self._over = True

    def _finish_step(self) -> None:
        # Hot path: the whole-array work below is skipped when nothing it fixes can have
        # happened (nobody left; only rows a decision set can differ from the no-op mask).
        over = self._over
        if over or self._any_left:
            ended = self.term_buf | self.trunc_buf  # they still get their final observation
        if over:
            self.live[:] = False
            self._pending.clear()
        pending = self._pending
        needs = self.needs_buf
        needs[:] = False
        if pending:
            needs[list(pending)] = True
        stale = self._masked.difference(pending)
        if stale:
            self.mask_buf[list(stale)] = self._noop_mask
        self._masked = set(pending)
        self._observe_all(self.obs_buf)
        if over or self._any_left:
            dead = ~(self.live | (ended & ~self._gone))
            if dead.any():
                self.obs_buf[dead] = 0.0
        if self._roster_changed or self._over:  # hot path: else the list is still right
            listed = self.live | self._gone if not self._over else self.live
            self.agents = [a for a, on in zip(self.possible_agents, listed, strict=True) if on]
            self._roster_changed = False

    def _check_agent_name(self, agent: str) -> None:
        if agent not in self._index:
            raise UnknownAgentError(
                f"unknown agent {agent!r}; possible agents: {self.possible_agents}"
            )

    def _legal(self, i: int) -> list[int]:
        return np.flatnonzero(self.mask_buf[i]).tolist()

    def _own_obs(self, i: int) -> np.ndarray:
        return self.obs_buf[i, : self.rows.obs_dims[i]].copy()

    def _obs_dict(self, names: list[str] | None = None) -> dict[str, Any]:
        names = self.agents if names is None else names
        index = self._index
        if self.mask_in_obs:
            widths = {k: s["action_mask"].shape[0] for k, s in self._obs_spaces.items()}
            kind = self.rows.kind
            return {
                a: {
                    "observation": self._own_obs(index[a]),
                    "action_mask": self.mask_buf[index[a], : widths[kind[index[a]]]].copy(),
                }
                for a in names
            }
        return {a: self._own_obs(index[a]) for a in names}

    def _info_dict(self, names: list[str]) -> dict[str, dict]:
        # The same keys with the same types on every step (TorchRL builds a spec from them).
        now = self.now
        infos = {}
        index, mask = self._index, self.mask_buf
        widths = self._mask_widths()
        for a in names:
            i = index[a]
            infos[a] = {
                "sim_time": now,
                "needs_action": bool(self.needs_buf[i]),
                "action_mask": mask[i, : widths[i]].copy(),
                "invalid_action": bool(self.invalid_buf[i]),
                "invalid_count": int(self.invalid_count[i]),
            }
        return infos

    def _mask_widths(self) -> np.ndarray:
        if self.rows.type is spaces.Discrete:
            return self.rows.n
        return np.full(len(self.possible_agents), self.rows.mask_dim)
