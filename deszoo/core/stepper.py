"""The bridge's hot path: the drive loop and one step, over the per-agent arrays.

A step (:meth:`Stepper.step_arrays`), top to bottom:

1. In strict mode, refuse masked-out and missing actions before anything changes.
2. Clear the last step's rewards (and its flags, when any were set).
3. Give every pending decision its value: ``event.succeed(value)`` for the agents that were
   at a decision point; a masked-out or missing action of one of them is replaced by a
   random legal action and flagged (``invalid_action="random"``; both policies are
   :mod:`deszoo.core.invalid`).
4. Run SimPy until an agent waits on a decision again (all events of that instant first),
   the model ends the episode, the event queue runs dry, or a limit is reached.
5. Finish: the rows whose decision ended get the no-op mask, the scenario observes
   (``_observe_all``), the rows of agents that left are zeroed, ``agents`` is rebuilt if
   the roster changed (a new list only then).

:class:`Stepper` builds on :class:`~deszoo.core.decisions.Decisions` (what model code
calls, and the state it shares with the step) and declares the hooks it calls
(``_build``, ``_observe_all``, ``_flush``), which a scenario overrides.
:class:`~deszoo.core.env.SimPyParallelEnv` builds on it (parameters, spaces, PettingZoo's
dict API). An observation the model cannot write, or rewards a ``_flush`` cannot book,
raise a :class:`~deszoo.errors.ModelError` that names the buffer and the shapes.

What a wrapper may read after a step or reset, besides the arrays: ``agents`` (a new list
only when it changed: someone left or the episode ended, the only steps that can set
``term_buf`` or ``trunc_buf``), ``episode_over``, ``now``, and the episode's counters
``num_steps``, ``num_events`` (SimPy events) and ``num_invalid`` (actions replaced).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import simpy

from deszoo.core.config import check_seed
from deszoo.core.decisions import NOOP, Decisions
from deszoo.core.groups import AgentRows
from deszoo.core.invalid import InvalidActions
from deszoo.errors import DeszooError, ModelError, ResetNeededError

__all__ = ["Stepper", "NOOP"]

_INF = float("inf")


class Stepper(Decisions):
    """The drive loop and the array API (see the module docstring).

    Args:
        name: the scenario's name, for messages.
        rows: the agents' row layout (:class:`~deszoo.core.groups.AgentRows`).
        strict: ``invalid_action="raise"``.
        black_death: agents that leave stay listed until the episode ends.
        invalid_penalty: reward subtracted for each replaced action.
        max_time, max_steps: the episode limits (``None``: none).
    """

    def __init__(self, name: str, rows: AgentRows, *, strict: bool, black_death: bool,
                 invalid_penalty: float, max_time: float | None, max_steps: int | None):
        super().__init__(name, rows, black_death)
        self.agents: list[str] = []
        self._strict = strict
        self._invalid = InvalidActions(self, name, invalid_penalty)
        self._limit(max_time, max_steps)
        self.rng: np.random.Generator | None = None
        self._seed_seq: np.random.SeedSequence | None = None
        self._decisions = 0  # since the env was built (the mask warning)
        self._closed = False
        self.num_steps = 0
        self.num_events = 0
        self.num_invalid = 0  # invalid actions replaced this episode (every agent)

    def _limit(self, max_time: float | None, max_steps: int | None) -> None:
        """The limits as the drive loop reads them (no lookups in the hot path)."""
        self._time_limit = _INF if max_time is None else max_time
        self._max_steps = max_steps

    # ---- hooks for scenarios (the step calls them) ---------------------------------
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
            try:
                self._observe(int(i), obs[i, : d[i]])
            except DeszooError:
                raise
            except (ValueError, TypeError) as exc:
                raise ModelError(
                    f"{self._name}: _observe({i}, out) for agent {self._agent_name(int(i))} "
                    f"could not write its observation: out is its row of obs_buf, "
                    f"{d[i]} float32 (shape ({d[i]},)): {exc}"
                ) from exc

    def _observe(self, i: int, out: np.ndarray) -> None:
        """Write agent ``i``'s observation into ``out`` (the convenience hook)."""
        raise NotImplementedError(
            f"{type(self).__name__} implements neither _observe_all nor _observe"
        )

    def _flush(self, until: float) -> None:
        """Book time-integrated rewards up to simulated time ``until`` (optional)."""

    # ---- array API (the vector backends' protocol: deszoo.core.arrays) -----------------
    def reset_arrays(self, seed: int | None = None) -> None:
        """Start a new episode; results are in ``obs_buf``, ``mask_buf`` and ``live``."""
        if seed is not None:
            check_seed(seed, f"{self._name}.reset")
            self._seed_seq = np.random.SeedSequence(int(seed))
        elif self._seed_seq is None:
            self._seed_seq = np.random.SeedSequence()
        episode_seq = self._seed_seq.spawn(1)[0]
        self.rng = np.random.default_rng(episode_seq)
        self._invalid.new_episode(episode_seq)  # (its generator: drawn when first needed)
        self.sim = simpy.Environment()
        self._pending = {}
        self._round = None  # the latest every() round (together=True), see _deliver
        self._late_masks = []
        self._closed = False
        self.episode_over = False
        self.num_steps = 0
        self.num_events = 0
        self.live[:] = True
        self._gone[:] = False
        self._left = set()
        self._roster_changed = True
        self.term_buf[:] = False
        self.trunc_buf[:] = False
        self.rew_buf[:] = 0.0
        self.invalid_buf[:] = False
        self.invalid_count[:] = 0
        self.num_invalid = 0
        # A vector env may report the ended episode's flags in these arrays after this
        # reset (same-step autoreset), so the next step clears them.
        self._flags_set = True
        self._build()
        self._advance()
        self.rew_buf[:] = 0.0  # rewards before the first decision belong to no action
        self._finish()

    def step_arrays(self, acts: Any, missing: np.ndarray | None = None) -> None:
        """Step with one action per possible agent (row ``acts[i]``, padded).

        ``acts`` is an array of one action per row, or (``Discrete`` actions) a list of
        ints. Actions must already be in the action space; the masks are applied here:
        only the actions of agents at a decision point are read. ``missing`` (bool per
        agent, optional) marks agents that sent no action.
        """
        if self._discrete and type(acts) is not list:
            acts = acts.tolist()  # hot path: ints index the mask rows fastest
        if self.episode_over:
            raise ResetNeededError(
                f"{self._name}: step_arrays() called {self._not_running()}; call reset() first"
            )
        pending = self._pending
        if self._strict:
            self._invalid.refuse(np.asarray(acts), missing, pending)  # before any change
        self.rew_buf.fill(0.0)
        if self._flags_set:
            self.term_buf.fill(False)
            self.trunc_buf.fill(False)
            self.invalid_buf.fill(False)
            self._flags_set = False
        if pending:
            self._pending = {}
            self._deliver(pending, acts, missing)
        self.num_steps += 1
        self._advance()
        self._finish()

    def close(self) -> None:
        """End the episode for good: ``reset`` starts a new one."""
        self.sim = None
        self._pending = {}
        self._closed = True
        self.episode_over = True

    def _not_running(self) -> str:
        """Why there is no episode to step (for messages)."""
        if self._closed:
            return "after close()"
        if self.sim is None:
            return "before reset()"
        if self.num_steps == 0:  # no agent reached a decision before the end
            return (f"after the episode ended inside reset() (at simulated time "
                    f"{float(self.sim.now):.6g}, before any decision: a max_time or max_steps "
                    "too short for this model and seed?)")
        return "after the episode ended"

    # ---- the step's parts -------------------------------------------------------------
    def _deliver(self, pending: dict, acts: Any, missing: np.ndarray | None) -> None:
        """Succeed each pending decision with its agent's action, replacing invalid ones."""
        mask, discrete = self.mask_buf, self._discrete
        self._decisions += len(pending)
        for i in pending:  # hot path: one mask lookup per deciding agent
            legal = mask[i, acts[i]] if discrete else self.rows.legal_row(mask[i], acts[i])
            if not legal or (missing is not None and missing[i]):
                acts = self._invalid.replace(pending, acts, missing, self._decisions)
                self._flags_set = True
                break
        round_ = self._round
        if round_ is not None and round_.left == len(pending) and not round_.moving:
            # the agents of the latest ``every`` round, and nobody else (``left`` counts its
            # agents in ``pending``): one SimPy event for all
            round_.deliver({i: self._value(i, acts[i], values)
                            for i, (_, values) in pending.items()})
        elif discrete:
            for i, (event, values) in pending.items():
                a = acts[i]
                if values is not None:
                    try:
                        a = values(a) if callable(values) else values[a]
                    except (IndexError, KeyError) as exc:
                        raise self._bad_values(i, a, values) from exc
                event.succeed(a)
        else:
            for i, (event, values) in pending.items():
                event.succeed(self._value(i, acts[i], values))

    def _advance(self) -> None:
        """Run the simulation to the next decision point, the episode's end or a limit."""
        sim = self.sim
        pending = self._pending
        limit = self._time_limit
        count = 0
        peek, step = sim.peek, sim.step  # hot path: once per SimPy event
        try:
            while True:
                if self.episode_over:  # the model ended the episode
                    self._flush(sim.now)
                    break
                t = peek()
                if pending and t > sim.now:  # a decision point: the instant is over
                    self._flush(sim.now)
                    break
                if t >= limit:  # (limit is at most inf, so this also catches t == inf)
                    if t == _INF:  # nothing can happen any more: the model is finished
                        self._flush(sim.now)
                        self.end_episode()
                        break
                    if t > limit:
                        if limit > sim.now:
                            sim.run(until=limit)
                        # (max_time moved below the clock mid-episode: book no time backwards)
                        self._flush(limit if limit >= sim.now else sim.now)
                        self._truncate()
                        break
                step()
                count += 1
        except (ValueError, TypeError) as exc:
            tb = exc.__traceback__
            if isinstance(exc, DeszooError) or tb is None or tb.tb_next is None or \
                    tb.tb_next.tb_frame.f_code.co_name != "_flush":
                raise
            raise self._bad_flush(exc) from exc  # (not in the hot path: only on failure)
        self.num_events += count
        limit = self._max_steps
        if not self.episode_over and limit is not None and self.num_steps >= limit:
            self._truncate()

    def _bad_flush(self, exc: Exception) -> ModelError:
        """What a ``_flush`` that failed to book its rewards is told: the buffer, its shape,
        the agent of each row."""
        agents = ", ".join(f"{i}: {a!r}" for i, a in enumerate(self.possible_agents[:8]))
        more = ", ..." if len(self.possible_agents) > 8 else ""
        return ModelError(
            f"{self._name}: _flush could not book the rewards: rew_buf has shape "
            f"{self.rew_buf.shape} (one float per agent, row i for possible_agents[i]: "
            f"{agents}{more}; add an agent's reward with self.rew_buf[i] += r or "
            f"add_reward(i, r)): {type(exc).__name__}: {exc}"
        )

    def _truncate(self) -> None:
        self.trunc_buf[self.live | self._gone] = True
        self._flags_set = True
        self.episode_over = True

    def _finish(self) -> None:
        """Masks of the rows whose decision ended, observations, the roster."""
        over = self.episode_over
        pending = self._pending
        if over or self._left:
            ended = self.term_buf | self.trunc_buf  # they still get their final observation
        if over:
            self.live[:] = False
            pending.clear()
        masked = self._masked
        if len(masked) != len(pending):  # (pending is a subset of masked)
            for i in masked.difference(pending):  # decided earlier, not deciding now
                self.mask_buf[i] = self._noop_mask
                self.needs_buf[i] = False
            self._masked = set(pending)
        if self._late_masks:
            for i, mask in self._late_masks:
                if i in pending:
                    self._write_mask(i, mask())
            self._late_masks = []
        try:
            self._observe_all(self.obs_buf)
        except DeszooError:
            raise
        except (ValueError, TypeError) as exc:
            raise ModelError(
                f"{self._name}: _observe_all could not write the observations: obs_buf has "
                f"shape {self.obs_buf.shape} (one row of {self.rows.obs_dim} float32 per "
                f"agent; agent i's own observation is its first observation_space(agent)."
                f"shape[0] entries): {exc}"
            ) from exc
        if over or self._left:
            dead = ~(self.live | (ended & ~self._gone))
            if dead.any():
                self.obs_buf[dead] = 0.0
        if self._roster_changed or over:  # hot path: else the list is still right
            listed = self.live | self._gone if not over else self.live
            # (a new list only when it changes: the dict API knows nobody left otherwise)
            self.agents = [a for a, on in zip(self.possible_agents, listed, strict=True) if on]
            self._roster_changed = False
