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

The class is split by job: construction (parameters, presets, rows, spaces) and the hooks a
scenario implements are here; the hot path (decisions, the drive loop, ``step_arrays``) is
:mod:`deszoo.core.stepper`; PettingZoo's dict API over the arrays is
:mod:`deszoo.core.facade`; ``render()`` is :mod:`deszoo.core.rendering`.

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

from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from deszoo.core.arrays import allocate
from deszoo.core.facade import DictFacade
from deszoo.core.groups import AgentRows, Group
from deszoo.core.memory import check_fits, env_bytes
from deszoo.core.params import COMMON, Config, Param, check_all, configure, plain
from deszoo.core.rendering import Rendering
from deszoo.core.stepper import NOOP, Stepper
from deszoo.errors import ConfigError, ResetNeededError

__all__ = ["SimPyParallelEnv", "NOOP", "COMMON_PARAMS"]

COMMON_PARAMS = COMMON  # the bridge's parameters (see deszoo.core.params)


def _rebuild(cls: type, kwargs: dict[str, Any]) -> SimPyParallelEnv:
    return cls(**kwargs)


class SimPyParallelEnv(DictFacade, Rendering, Stepper, ParallelEnv):
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
        self._strict = self.config["invalid_action"] == "raise"
        self._black_death = bool(self.config["black_death"])
        self._invalid_penalty = self.config["invalid_penalty"]
        self._set_limits()

        groups = self._setup()
        rows = AgentRows([groups] if isinstance(groups, Group) else list(groups), name)
        n = len(rows.names)
        check_fits(name, env_bytes(n, rows.obs_dim, rows.mask_dim),
                   f"{n} agents, observations of {rows.obs_dim} floats")
        if self.mask_in_obs and rows.type is spaces.Box:
            raise ConfigError(f"{name}: mask_in_obs needs Discrete or MultiDiscrete actions")
        self.rows = rows
        self.groups = rows.groups
        self.possible_agents: list[str] = list(rows.names)
        self.agents: list[str] = []
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        self._group_of = {a: rows.groups[k] for a, k in zip(rows.names, rows.kind, strict=True)}
        self._discrete = rows.type is spaces.Discrete
        if self._discrete:
            self.n_actions = int(rows.mask_dim)
        self._setup_spaces(rows)
        self.state_space = self._state_setup() or self._observations_box(rows)
        if not (isinstance(self.state_space, spaces.Box) and len(self.state_space.shape) == 1
                and self.state_space.dtype == np.float32):
            raise ConfigError(f"{name}: _state_setup() must return a flat float32 Box, got "
                              f"{self.state_space}")
        allocate(self, rows)  # the per-agent arrays (deszoo.core.arrays)
        self._gone = np.zeros(n, dtype=bool)  # left, but listed until the end (black_death)
        self._noop_mask = rows.noop_mask()
        self._full_masks = [rows.full_mask(i) for i in range(n)]
        self._full_mask_rows = np.array(self._full_masks)  # (one write for an every() round)
        self.sim = None
        self.rng: np.random.Generator | None = None
        self._seed_seq: np.random.SeedSequence | None = None
        self._episode_seq: np.random.SeedSequence | None = None
        self._fallback_rng: np.random.Generator | None = None
        self._pending: dict[int, tuple[Any, Any]] = {}  # row -> (decision event, values)
        self._round = None  # the latest every() round, see Stepper._deliver
        self._late_masks: list = []  # (row, mask()) of masks computed when the step ends
        self._masked: set[int] = set()  # rows whose mask is not the no-op mask
        self._left: set[int] = set()  # rows of agents that left this episode
        self._listed: set[str] = set()  # names in agents, while some have left
        self._roster_changed = False  # an agent left or the episode started: rebuild agents
        self._flags_set = False  # term, trunc or invalid flags set since the step began
        self._any_invalid = False  # an invalid action was replaced this episode
        self._decisions = self._replaced = 0  # since the env was built (the mask warning)
        self._over = True
        self._closed = False
        self.num_steps = 0
        self.num_events = 0

    def _setup_spaces(self, rows: AgentRows) -> None:
        """Cached per-group spaces, and each group's rows and widths for the dict API."""
        self._obs_spaces: dict[int, spaces.Space] = {}
        self._obs_widths: list[tuple[int, int, int]] = []
        self._mask_widths: list[tuple[int, int, int]] = []
        lo = 0
        for k, g in enumerate(rows.groups):
            hi = lo + len(g.names)
            width = int(g.action.n) if rows.type is spaces.Discrete else rows.mask_dim
            self._obs_widths.append((lo, hi, int(g.observation.shape[0])))
            self._mask_widths.append((lo, hi, width))
            if self.mask_in_obs:
                self._obs_spaces[k] = spaces.Dict({
                    "observation": g.observation,
                    "action_mask": spaces.Box(0, 1, (width,), dtype=np.int8),
                })
            else:
                self._obs_spaces[k] = g.observation
            lo = hi
        # One group, or groups of equal widths: the dict API copies the arrays whole.
        self._one_width = (len({d for _, _, d in self._obs_widths}) == 1 and rows.obs_dim
                           == self._obs_widths[0][2] and len({k for _, _, k in self._mask_widths})
                           == 1 and rows.mask_dim == self._mask_widths[0][2])
        # Per row: the size of its Discrete space (the dict API's quick action check).
        self._n_actions = rows.n.tolist() if rows.type is spaces.Discrete else []
        # Kept for scenarios and tools that knew one space: the first group's.
        self._box = rows.groups[0].observation

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
        self.config[key] = value
        self._kwargs[key] = value
        self._set_limits()

    def _set_limits(self) -> None:
        """The limits as the drive loop reads them (no lookups in the hot path)."""
        max_time = self.config["max_time"]
        self._time_limit = float("inf") if max_time is None else max_time
        self._max_steps = self.config["max_steps"]

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

    def _build(self) -> None:
        """Create the model and start its processes on ``self.sim`` using ``self.rng``."""
        raise NotImplementedError

    def _observe_all(self, obs: np.ndarray) -> None:
        """Write every agent's observation into its row of ``obs`` (``obs_buf``), once per
        step; rows of agents that have left are zeroed afterwards by the bridge.

        Called at the end of every step and reset, after ``mask_buf`` is final for the step
        (a deciding agent's mask as the model set it, else the no-op mask), so a model may
        refine a deciding agent's mask here from the state it observes. ``obs`` is not
        cleared between steps: write every entry of the rows you observe. The default calls
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
                f"{self.metadata['name']}: state() called " + self._not_running()
                + "; call reset() first"
            )
        self._state_all(out)

    def __reduce__(self):
        return (_rebuild, (type(self), dict(self._kwargs)))
