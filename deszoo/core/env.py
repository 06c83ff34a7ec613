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

The class is split by job: construction (parameters, presets, rows, spaces), the global
state and ``render()`` are here; the array step it builds on (decisions, the drive loop,
``step_arrays``, the hooks it calls) is :class:`~deszoo.core.stepper.Stepper`; PettingZoo's
dict API is a :class:`~deszoo.core.facade.DictAPI` that wraps the array step and owns its
caches; the invalid-action contract is :mod:`deszoo.core.invalid`.

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
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from deszoo._links import doc
from deszoo.core.canvas import drop_canvas
from deszoo.core.facade import DictAPI
from deszoo.core.groups import AgentRows, Group
from deszoo.core.memory import check_fits, env_bytes
from deszoo.core.params import COMMON, Config, Param, check_all, configure, plain
from deszoo.core.stepper import NOOP, Stepper
from deszoo.errors import ConfigError, DeszooError, ModelError, ResetNeededError

__all__ = ["SimPyParallelEnv", "NOOP", "COMMON_PARAMS"]

COMMON_PARAMS = COMMON  # the bridge's parameters (see deszoo.core.params)


def _rebuild(cls: type, kwargs: dict[str, Any]) -> SimPyParallelEnv:
    return cls(**kwargs)


class SimPyParallelEnv(Stepper, ParallelEnv):
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
    # False for a model that never ends by itself: max_time and max_steps may not both be None.
    ends_by_itself: ClassVar[bool] = True

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
        if not isinstance(mask_in_obs, (bool, np.bool_)):
            raise ConfigError(f"{name}: mask_in_obs={mask_in_obs!r} must be True or False")
        self.config, kwargs = configure(name, self.all_params(), self.presets, preset, kwargs)
        self.render_mode = render_mode
        self.mask_in_obs = bool(mask_in_obs)
        self._kwargs = {
            "render_mode": render_mode, "preset": preset, "mask_in_obs": self.mask_in_obs,
            **kwargs,
        }
        self.p = Config(self.config)  # what the model reads: self.p.n_machines
        strict = self.config["invalid_action"] == "raise"
        if (not self.ends_by_itself and self.config["max_time"] is None
                and self.config["max_steps"] is None):
            raise ConfigError(f"{name}: max_time=None and max_steps=None: the episode never "
                              "ends; set max_time or max_steps")

        groups = self._setup()
        rows = AgentRows([groups] if isinstance(groups, Group) else list(groups), name)
        n = len(rows.names)
        check_fits(name, env_bytes(n, rows.obs_dim, rows.mask_dim),
                   f"{n} agents, observations of {rows.obs_dim} floats")
        if self.mask_in_obs and rows.type is spaces.Box:
            raise ConfigError(f"{name}: mask_in_obs needs Discrete or MultiDiscrete actions")
        super().__init__(  # the array step (deszoo.core.stepper): arrays, episode state
            name, rows, strict=strict, black_death=bool(self.config["black_death"]),
            invalid_penalty=self.config["invalid_penalty"], max_time=self.config["max_time"],
            max_steps=self.config["max_steps"],
        )
        self.groups = rows.groups
        if rows.type is spaces.Discrete:
            self.n_actions = int(rows.mask_dim)
        self._dict = DictAPI(self, mask_in_obs=self.mask_in_obs, strict=strict)
        self.state_space = self._state_setup() or self._observations_box(rows)
        if not (isinstance(self.state_space, spaces.Box) and len(self.state_space.shape) == 1
                and self.state_space.dtype == np.float32):
            raise ConfigError(f"{name}: _state_setup() must return a flat float32 Box, got "
                              f"{self.state_space}")

    # ---- PettingZoo's dict API (deszoo.core.facade over step_arrays) -------------------
    def observation_space(self, agent: str) -> spaces.Space:
        return self._dict.observation_space(agent)  # cached, per group

    def action_space(self, agent: str) -> spaces.Space:
        return self._dict.action_space(agent)

    def reset(
        self, seed: int | None = None, options: dict | None = None
    ) -> tuple[dict[str, Any], dict[str, dict]]:
        return self._dict.reset(seed)

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if self.sim is None or not self.agents:
            raise ResetNeededError(
                f"{self._name}: step() called " + self._not_running()
                + "; call reset() first" + self._ended_hint()
            )
        return self._dict.step(actions)

    def close(self) -> None:
        super().close()
        drop_canvas(self)  # the rgb_array figure, if one was drawn

    def _ended_hint(self) -> str:
        if self.sim is None or self._closed or self.num_steps == 0:
            return ""
        # The usual caller: a wrapper that never saw the end (SuperSuit 3.11's black_death_v3
        # reports an episode done only when every agent is terminated *and* truncated).
        return (" (if a wrapper kept stepping: SuperSuit 3.11's black_death_v3 never reports "
                "the end of an episode; drop it, deszoo's black_death=True, the default, keeps "
                f"every agent listed already; see {doc('compatibility.md#agents-that-leave')})")

    @staticmethod
    def _observations_box(rows: AgentRows) -> spaces.Box:
        """The default state's space: every agent's observation row (padded), in row order."""
        low = np.zeros((len(rows.names), rows.obs_dim), dtype=np.float32)
        high = np.zeros_like(low)
        for i, k in enumerate(rows.kind):
            box = rows.groups[k].observation
            low[i, : box.shape[0]] = box.low
            high[i, : box.shape[0]] = box.high
        return spaces.Box(low.reshape(-1), high.reshape(-1), dtype=np.float32)

    @classmethod
    def all_params(cls) -> dict[str, Param]:
        """The bridge's parameters (``max_steps``, ...) and the scenario's, in that order;
        a scenario may redeclare a bridge parameter to change its default."""
        return {**COMMON_PARAMS, **cls.params}

    # Episode limits as attributes, so ``vec.set_attr("max_steps", 100)`` works per sim (and
    # ``max_cycles``, PettingZoo's name, which its parallel_api_test sets).
    def _set_limit(self, key: str, value: Any, given: str | None = None) -> None:
        value = plain(value)  # (NumPy scalars as in configure)
        check_all(self.metadata["name"], {key: COMMON_PARAMS[key]}, {key: value},
                  {key: given or key})
        other = "max_time" if key == "max_steps" else "max_steps"
        if value is None and self.config[other] is None and not self.ends_by_itself:
            raise ConfigError(f"{self.metadata['name']}: {given or key}=None with {other}=None: "
                              f"the episode never ends; keep a limit")
        self.config[key] = value
        self._kwargs[key] = value
        self._limit(self.config["max_time"], self.config["max_steps"])

    @property
    def max_steps(self) -> int | None:
        """Truncate after this many env steps (``None``: no limit)."""
        return self.config["max_steps"]

    @max_steps.setter
    def max_steps(self, value: int | None) -> None:
        self._set_limit("max_steps", value)

    @property
    def max_cycles(self) -> int | None:
        """PettingZoo's name for :attr:`max_steps` (an error names ``max_cycles``)."""
        return self.config["max_steps"]

    @max_cycles.setter
    def max_cycles(self, value: int | None) -> None:
        self._set_limit("max_steps", value, "max_cycles")

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

    def _state_setup(self) -> spaces.Box | None:
        """The global state's space (a flat float32 ``Box``), or ``None`` (the default): the
        state is then every agent's observation row, concatenated in row order."""
        return None

    def _state_all(self, out: np.ndarray) -> None:
        """Write the global state (the whole system as the model sees it) into ``out``, a
        float32 vector of the state space's size; called by :meth:`state`, so only when
        someone asks. Implement it with :meth:`_state_setup`."""
        out[:] = self.obs_buf.reshape(-1)

    # ---- the global state (PettingZoo's state(); centralised critics read it) ----------
    def state(self) -> np.ndarray:
        """The global state after the last step or reset (a fresh array)."""
        out = np.empty(self.state_space.shape, dtype=np.float32)
        self.write_state(out)
        return out

    def write_state(self, out: np.ndarray) -> None:
        """Write the global state into ``out`` (e.g. a vector env's buffer row)."""
        if self.sim is None:
            raise ResetNeededError(
                f"{self._name}: state() called " + self._not_running()
                + "; call reset() first"
            )
        try:
            self._state_all(out)
        except DeszooError:
            raise
        except (ValueError, TypeError) as exc:
            raise ModelError(
                f"{self._name}: _state_all could not write the global state: out has shape "
                f"{np.shape(out)} (state_space {self.state_space}): {exc}"
            ) from exc

    # ---- render() (PettingZoo's) over the scenario's two drawing hooks -----------------
    def render(self) -> str | np.ndarray | None:
        """The current picture: text (``human`` prints it, ``ansi`` returns it) or an
        ``rgb_array`` (see :mod:`deszoo.core.canvas`)."""
        if self.render_mode == "rgb_array":
            return self._render_rgb()
        if self.render_mode == "ansi":
            if self.rng is None:  # never reset: no model to describe (as the rgb_array frame)
                return f"{self._name}: no episode yet (call reset())"
            return self._render_text()
        if self.render_mode == "human":
            if self.sim is not None:
                sys.stdout.write(self._render_text() + "\n")
            return None
        return None

    def _render_text(self) -> str:
        """One frame as text (``human``, ``ansi``)."""
        return f"{self._name} t={self.now:.2f}"

    def _render_rgb(self) -> np.ndarray:
        """One frame as an RGB array (``rgb_array``), usually drawn with
        :func:`deszoo.core.canvas.frame`."""
        raise NotImplementedError(f"{type(self).__name__} draws no rgb_array pictures")

    def __reduce__(self):
        return (_rebuild, (type(self), dict(self._kwargs)))
