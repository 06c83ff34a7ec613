"""The SimPy-to-PettingZoo bridge.

A scenario subclasses :class:`SimPyParallelEnv`, writes its model as SimPy processes
and asks for an agent's decision by yielding the event the bridge hands out::

    action = yield self.decide(i, mask)

``step(actions)`` gives every pending decision its action and runs the simulation until
at least one agent waits for a decision again (all events at that instant are processed
first, so agents that decide at the same simulated time decide in the same step), or
until the episode ends.

Semantics shared by every scenario:

=====================  =====================================================================
Actions                ``Discrete(n_actions)``. Action ``0`` is the no-op.
Agents not deciding    Live agents that are not at a decision point have the mask
                       ``[1, 0, ..., 0]`` (only the no-op) and ``needs_action`` False. They
                       may be left out of the action dict or sent ``0``.
Observations           Flat ``Box(float32)``, the same space for every agent.
Rewards                Accumulated over the simulated interval between two steps.
``infos[agent]``       ``sim_time`` (clock after the step), ``needs_action`` (bool) and
                       ``action_mask`` (``int8``, shape ``(n_actions,)``).
Termination            When the model ends the episode, or the event queue runs dry.
Truncation             ``max_time`` (simulated) or ``max_steps`` (env steps) reached.
Leaving agents         ``self.remove_agent(i)`` terminates one agent; it leaves ``agents``.
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
  (also a non-zero action of an agent that is not deciding), a missing one
  ``MissingActionError``, an action for an agent that has left ``UnknownAgentError``.

Actions outside the action space always raise ``InvalidActionError``.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

import numpy as np
import simpy
from gymnasium import spaces
from pettingzoo import ParallelEnv

from deszoo.core.config import check_seed, is_int, is_number
from deszoo.errors import (
    ConfigError,
    InvalidActionError,
    MaskedActionError,
    MissingActionError,
    ResetNeededError,
    UnknownAgentError,
)

__all__ = ["SimPyParallelEnv", "NOOP"]

NOOP = 0

COMMON_DEFAULTS: dict[str, Any] = {
    "max_steps": None,
    "max_time": None,
    "invalid_action": "random",
    "invalid_penalty": 0.0,
    "black_death": False,
}
INVALID_MODES = ("random", "raise")


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

    Subclasses set ``metadata["name"]``, ``defaults`` (every scenario parameter with its
    default; ``max_steps`` and ``max_time`` may be overridden there) and ``presets``, and
    implement :meth:`_setup`, :meth:`_build`, :meth:`_observe` and :meth:`_render_text`.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["human", "ansi"], "name": "simpy_env"}
    defaults: ClassVar[dict[str, Any]] = {}
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
        allowed = {**COMMON_DEFAULTS, **self.defaults}
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            raise ConfigError(
                f"{name}: unknown argument(s) {unknown}; valid arguments: render_mode, "
                f"preset, mask_in_obs, max_cycles, {', '.join(sorted(allowed))}"
            )
        self.render_mode = render_mode
        self.mask_in_obs = bool(mask_in_obs)
        self._kwargs = {
            "render_mode": render_mode, "preset": preset, "mask_in_obs": self.mask_in_obs,
            **kwargs,
        }
        self.config: dict[str, Any] = {**allowed, **self.presets[preset], **kwargs}
        mode = self.config["invalid_action"]
        if mode == "noop":
            raise ConfigError(
                f"{name}: invalid_action='noop' was removed: it left the agent waiting, which "
                "froze simulated time; use 'random' (the default: a random legal action, "
                "flagged in infos) or 'raise'"
            )
        if mode not in INVALID_MODES:
            raise ConfigError(
                f"{name}: invalid_action={mode!r}; valid: 'random' (default) or 'raise'"
            )
        penalty = self.config["invalid_penalty"]
        if not is_number(penalty) or not 0 <= penalty < float("inf"):
            raise ConfigError(
                f"{name}: invalid_penalty={penalty!r} must be a finite number >= 0"
            )
        self._strict = mode == "raise"
        if not isinstance(self.config["black_death"], (bool, np.bool_)):
            raise ConfigError(
                f"{name}: black_death={self.config['black_death']!r} must be True or False"
            )
        self._black_death = bool(self.config["black_death"])
        for key in ("max_steps", "max_time"):
            self._check_limit(key, self.config[key])

        names, obs_low, obs_high, n_actions = self._setup()
        self.possible_agents: list[str] = list(names)
        self.agents: list[str] = []
        self._index = {name: i for i, name in enumerate(self.possible_agents)}
        self.n_actions = int(n_actions)
        low = np.asarray(obs_low, dtype=np.float32)
        high = np.asarray(obs_high, dtype=np.float32)
        self._box = spaces.Box(low, high, dtype=np.float32)
        self._mask_space = spaces.Box(0, 1, (self.n_actions,), dtype=np.int8)
        if self.mask_in_obs:  # PettingZoo's convention for masks in observations
            self._obs_space = spaces.Dict(
                {"observation": self._box, "action_mask": self._mask_space}
            )
        else:
            self._obs_space = self._box
        self._act_space = spaces.Discrete(self.n_actions)
        n, d = len(self.possible_agents), self._box.shape[0]
        # Per-agent state lives in arrays so vector backends can copy it out in one go.
        self.obs_buf = np.zeros((n, d), dtype=np.float32)
        self.mask_buf = np.zeros((n, self.n_actions), dtype=np.int8)
        self.rew_buf = np.zeros(n, dtype=np.float32)
        self.term_buf = np.zeros(n, dtype=bool)
        self.trunc_buf = np.zeros(n, dtype=bool)
        self.live = np.zeros(n, dtype=bool)
        self.needs_buf = np.zeros(n, dtype=bool)
        self.invalid_buf = np.zeros(n, dtype=bool)
        self.invalid_count = np.zeros(n, dtype=np.int32)
        self._gone = np.zeros(n, dtype=bool)  # left, but listed until the end (black_death)
        self._rows = np.arange(n)
        self.sim: simpy.Environment | None = None
        self.rng: np.random.Generator | None = None
        self._seed_seq: np.random.SeedSequence | None = None
        self._episode_seq: np.random.SeedSequence | None = None
        self._fallback_rng: np.random.Generator | None = None
        self._pending: dict[int, simpy.Event] = {}
        self._over = True
        self._closed = False
        self.num_steps = 0
        self.num_events = 0

    def _check_limit(self, key: str, value: Any) -> None:
        if value is None:
            return
        if key == "max_steps":
            ok = is_int(value) and value > 0
        else:
            ok = is_number(value) and 0 < value < float("inf")
        if not ok:
            need = "a positive int" if key == "max_steps" else "a positive finite number"
            raise ConfigError(f"{self.metadata['name']}: {key}={value!r} must be {need} or None")

    # Episode limits as attributes, so ``vec.set_attr("max_steps", 100)`` works per sim (and
    # ``max_cycles``, PettingZoo's name, which its parallel_api_test sets).
    @property
    def max_steps(self) -> int | None:
        """Truncate after this many env steps (``None``: no limit)."""
        return self.config["max_steps"]

    @max_steps.setter
    def max_steps(self, value: int | None) -> None:
        self._check_limit("max_steps", value)
        self.config["max_steps"] = value
        self._kwargs["max_steps"] = value

    max_cycles = max_steps

    @property
    def max_time(self) -> float | None:
        """Truncate when the simulated clock would pass this time (``None``: no limit)."""
        return self.config["max_time"]

    @max_time.setter
    def max_time(self, value: float | None) -> None:
        self._check_limit("max_time", value)
        self.config["max_time"] = value
        self._kwargs["max_time"] = value

    # ---- hooks for scenarios -------------------------------------------------------
    def _setup(self) -> tuple[list[str], np.ndarray, np.ndarray, int]:
        """Return agent names, observation low and high bounds, and ``n_actions``."""
        raise NotImplementedError

    def _build(self) -> None:
        """Create the model and start its processes on ``self.sim`` using ``self.rng``."""
        raise NotImplementedError

    def _observe(self, i: int, out: np.ndarray) -> None:
        """Write live agent ``i``'s observation into ``out`` (a row of ``obs_buf``).

        Called at the end of every step and reset, after ``mask_buf[i]`` is final for the
        step (a deciding agent's mask as the model set it, else the no-op mask), so a model
        may refine a deciding agent's mask here from the same state it observes.
        """
        raise NotImplementedError

    def _flush(self, until: float) -> None:
        """Book time-integrated rewards up to simulated time ``until`` (optional)."""

    def _render_text(self) -> str:
        return f"{self.metadata['name']} t={self.now:.2f}"

    # ---- API for model code -------------------------------------------------------
    @property
    def now(self) -> float:
        return 0.0 if self.sim is None else float(self.sim.now)

    def decide(self, i: int, mask: np.ndarray | list[int]) -> simpy.Event:
        """Event a process yields to wait for agent ``i``'s action under ``mask``."""
        if i in self._pending:
            raise RuntimeError(f"agent {self.possible_agents[i]!r} already waits for a decision")
        if not self.live[i]:
            raise RuntimeError(f"agent {self.possible_agents[i]!r} has left; it cannot decide")
        row = self.mask_buf[i]
        row[:] = mask
        if not row.any():
            raise RuntimeError(f"model bug: agent {self.possible_agents[i]!r} got an all-zero mask")
        event = self.sim.event()
        self._pending[i] = event
        return event

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
        """
        if not self.live[i]:
            return
        self.live[i] = False
        if self._black_death:
            self._gone[i] = True
        else:
            self.term_buf[i] = True
        event = self._pending.pop(i, None)
        if event is not None:
            event.succeed(NOOP)
        if not self.live.any():  # nobody is left to decide: the episode is over
            self.term_buf[self._gone] = True
            self._over = True

    def needs_action(self, i: int) -> bool:
        return i in self._pending

    @property
    def episode_over(self) -> bool:
        """True once the episode has terminated or truncated (``reset`` is needed)."""
        return self._over

    def start_periodic(self, dt: float, mask_fn, apply_fn) -> simpy.Process:
        """Fixed-interval mode: every ``dt`` time units all live agents decide at once.

        ``mask_fn(i)`` gives agent ``i``'s mask; ``apply_fn(i, action)`` applies its action.
        """
        if not dt > 0:
            raise ConfigError(f"decision interval dt={dt!r} must be positive")

        def clock():
            sim = self.sim
            while True:
                events = {i: self.decide(i, mask_fn(i)) for i in np.flatnonzero(self.live)}
                if events:
                    yield sim.all_of(list(events.values()))
                    for i, event in events.items():
                        apply_fn(int(i), event.value)
                yield sim.timeout(dt)

        return self.sim.process(clock())

    # ---- PettingZoo API -----------------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Space:
        self._check_agent_name(agent)
        return self._obs_space  # one cached object for every agent and every call

    def action_space(self, agent: str) -> spaces.Discrete:
        self._check_agent_name(agent)
        return self._act_space

    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, Any], dict[str, dict]]:
        self.reset_arrays(seed)
        return self._obs_dict(), self._info_dict(self.agents)

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if self.sim is None or not self.agents:
            raise ResetNeededError(
                f"{self.metadata['name']}: step() called "
                + self._not_running()
                + "; call reset() first"
            )
        if not isinstance(actions, dict):
            raise InvalidActionError(
                f"actions must be a dict from agent name to action, got {type(actions).__name__}"
            )
        acts = np.zeros(len(self.possible_agents), dtype=np.int64)
        given = np.zeros(len(self.possible_agents), dtype=bool)
        for name, action in actions.items():
            i = self._index.get(name)
            if i is None:
                raise UnknownAgentError(
                    f"action for unknown agent {name!r}; possible agents: "
                    f"{self.possible_agents}"
                )
            value = self._check_action(name, action)
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

    def close(self) -> None:
        canvas = self.__dict__.pop("_canvas", None)  # the rgb_array figure, if one was drawn
        if canvas is not None:
            canvas.close()
        self.sim = None
        self._pending = {}
        self._closed = True

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
        """Step with one action per possible agent (``acts[i]``).

        Actions must already be in the action space; the masks are applied here.
        ``missing`` (bool per agent, optional) marks agents that sent no action.
        """
        if self._over:
            raise ResetNeededError(f"{self.metadata['name']}: episode ended; call reset() first")
        invalid = self.invalid_buf
        invalid[:] = False
        legal = self.mask_buf[self._rows, acts]
        if missing is not None or not legal.all():
            acts = self._apply_invalid(acts, legal.astype(bool), missing)
        self.rew_buf[:] = 0.0
        self.term_buf[:] = False
        for i, event in list(self._pending.items()):
            del self._pending[i]
            event.succeed(int(acts[i]))
        if invalid.any():
            self.rew_buf[invalid] -= self.config["invalid_penalty"]
        self.num_steps += 1
        self._advance()
        self._finish_step()

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
                    f"agent {self.possible_agents[i]!r} got action {int(acts[i])}; valid "
                    f"actions under its mask: {self._legal(i)}"
                )
        acts = acts.copy()
        for i in bad:
            if i not in self._pending:
                continue  # not deciding, or gone: its action is ignored
            if self._fallback_rng is None:
                self._fallback_rng = np.random.default_rng(self._episode_seq.spawn(1)[0])
            choices = np.flatnonzero(self.mask_buf[i])
            acts[i] = choices[int(self._fallback_rng.integers(len(choices)))]
            self.invalid_buf[i] = True
            self.invalid_count[i] += 1
        return acts

    # ---- internals ----------------------------------------------------------------
    def _advance(self) -> None:
        sim = self.sim
        pending = self._pending
        max_time = self.config["max_time"]
        limit = float("inf") if max_time is None else max_time
        count = 0
        while not self._over:
            t = sim.peek()
            if pending and t > sim.now:
                break
            if t == float("inf"):  # nothing can happen any more: the model is finished
                self._flush(sim.now)
                self.end_episode()
                break
            if t > limit:
                if limit > sim.now:
                    sim.run(until=limit)
                self._flush(limit)
                self._truncate()
                break
            sim.step()
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
        ended = self.term_buf | self.trunc_buf  # these agents still get their final observation
        if self._over:
            self.live[:] = False
            self._pending.clear()
        pending = self._pending
        self.needs_buf[:] = False
        for i in range(len(self.possible_agents)):
            if i in pending:
                self.needs_buf[i] = True
            else:
                self.mask_buf[i] = 0
                self.mask_buf[i, NOOP] = 1
            if self.live[i] or (ended[i] and not self._gone[i]):
                self._observe(i, self.obs_buf[i])
            else:
                self.obs_buf[i] = 0.0
        listed = self.live | self._gone if not self._over else self.live
        self.agents = [a for a, on in zip(self.possible_agents, listed, strict=True) if on]

    def _check_action(self, name: str, action: Any) -> int:
        if isinstance(action, (bool, np.bool_)) or not isinstance(action, (int, np.integer)):
            if isinstance(action, np.ndarray) and action.shape == () and action.dtype.kind in "iu":
                action = action.item()
            else:
                raise InvalidActionError(
                    f"agent {name!r} got action {action!r} of type {type(action).__name__}; "
                    f"expected an integer in 0..{self.n_actions - 1}"
                )
        if not 0 <= action < self.n_actions:
            raise InvalidActionError(
                f"agent {name!r} got action {action}; the action space is "
                f"Discrete({self.n_actions}), valid actions are 0..{self.n_actions - 1}"
            )
        return int(action)

    def _check_agent_name(self, agent: str) -> None:
        if agent not in self._index:
            raise UnknownAgentError(
                f"unknown agent {agent!r}; possible agents: {self.possible_agents}"
            )

    def _legal(self, i: int) -> list[int]:
        return np.flatnonzero(self.mask_buf[i]).tolist()

    def _obs_dict(self, names: list[str] | None = None) -> dict[str, Any]:
        names = self.agents if names is None else names
        if self.mask_in_obs:
            return {
                a: {
                    "observation": self.obs_buf[self._index[a]].copy(),
                    "action_mask": self.mask_buf[self._index[a]].copy(),
                }
                for a in names
            }
        return {a: self.obs_buf[self._index[a]].copy() for a in names}

    def _info_dict(self, names: list[str]) -> dict[str, dict]:
        # The same keys with the same types on every step (TorchRL builds a spec from them).
        now = self.now
        infos = {}
        for a in names:
            i = self._index[a]
            infos[a] = {
                "sim_time": now,
                "needs_action": bool(self.needs_buf[i]),
                "action_mask": self.mask_buf[i].copy(),
                "invalid_action": bool(self.invalid_buf[i]),
                "invalid_count": int(self.invalid_count[i]),
            }
        return infos
