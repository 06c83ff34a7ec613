"""The bridge's hot path: decisions, the drive loop and one step, over the per-agent arrays.

A step (:meth:`Stepper.step_arrays`), top to bottom:

1. In strict mode, refuse masked-out and missing actions before anything changes.
2. Clear the last step's rewards (and its flags, when any were set).
3. Give every pending decision its value: ``event.succeed(value)`` for the agents that were
   at a decision point; a masked-out or missing action of one of them is replaced by a
   random legal action and flagged (``invalid_action="random"``).
4. Run SimPy until an agent waits on a decision again (all events of that instant first),
   the model ends the episode, the event queue runs dry, or a limit is reached.
5. Finish: the rows whose decision ended get the no-op mask, the scenario observes
   (``_observe_all``), the rows of agents that left are zeroed, ``agents`` is rebuilt if
   the roster changed.

Each mask row is written once per step: by :meth:`Stepper.decide` (or an ``every`` round)
for an agent that decides (at the end of the step, for a mask given as a callable), or once
with the no-op mask when its decision ends. ``needs_buf`` is written only when it changes.
The set ``_masked`` holds the rows whose mask is not the no-op mask (and whose ``needs_buf``
is set): the agents deciding now, and those that decided during this step.

The class is a mixin of :class:`~deszoo.core.env.SimPyParallelEnv`, which sets up the
arrays (:mod:`deszoo.core.arrays`) and the attributes read here.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import simpy

from deszoo._links import doc
from deszoo.core.config import check_seed
from deszoo.errors import (
    ConfigError,
    MaskedActionError,
    MasksIgnoredWarning,
    MissingActionError,
    ResetNeededError,
)

__all__ = ["Stepper", "NOOP", "MASK_WARNING_SHARE", "MASK_WARNING_AFTER"]

NOOP = 0
_INF = float("inf")
MASK_WARNING_SHARE = 0.01  # warn when at least this share of decisions was replaced
MASK_WARNING_AFTER = 100  # ... out of at least this many decisions of one env
_WARNED: set[str] = set()  # scenarios warned about in this process


class Stepper:
    """Decisions, the drive loop and the array API (see the module docstring)."""

    # ---- API for model code -----------------------------------------------------------
    @property
    def now(self) -> float:
        return 0.0 if self.sim is None else float(self.sim.now)

    @property
    def episode_over(self) -> bool:
        """True once the episode has terminated or truncated (``reset`` is needed)."""
        return self._over

    def decide(
        self,
        i: int,
        mask: np.ndarray | Sequence[int] | Callable[[], Any] | None = None,
        *,
        values: Sequence[Any] | Callable[[Any], Any] | None = None,
    ) -> simpy.Event:
        """Event a process yields to wait for agent ``i``'s decision.

        Args:
            i: the agent's row: its index in ``possible_agents``.
            mask: the legal actions (``None``: all of the agent's actions); or a callable
                ``mask()`` that returns them, called once when the step ends, for a mask
                that depends on what else happens at this instant.
            values: what the model receives: ``values[action]`` (a sequence indexed by the
                action), ``values(action)`` (a callable, called when the action is
                delivered), or the action itself (``None``).
        """
        if i in self._pending:
            raise RuntimeError(f"agent {self.possible_agents[i]!r} already waits for a decision")
        self._check_live(i)
        if mask is None:
            self.mask_buf[i] = self._full_masks[i]  # (a list of rows: no view to make)
        else:
            self._set_mask(i, mask)
        if i not in self._masked:  # (else its row already says it decides)
            self.needs_buf[i] = True
            self._masked.add(i)
        event = simpy.Event(self.sim)
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
                pending = self._pending  # (a new dict each step)
                who = self.live.nonzero()[0].tolist() if agents is None else agents()
                who = [int(i) for i in who if i not in pending]  # (waiting: skipped)
                if together:
                    if who:
                        round_ = self._open_round(who, mask, values)
                        yield round_.event
                        for i, value in round_.values.items():
                            apply(i, value)
                else:  # one event each: apply may start processes, which run at once
                    for i in who:
                        if i in pending:  # (listed twice)
                            continue
                        event = self.decide(i, None if mask is None else mask(i),
                                            values=None if values is None else values(i))
                        event.callbacks.append(lambda ev, i=i: apply(i, ev.value))
                yield sim.timeout(dt)

        return self.sim.process(clock())

    def add_reward(self, i: int, value: float) -> None:
        """Add ``value`` to agent ``i``'s reward for the current step."""
        self.rew_buf[i] += value

    def end_episode(self) -> None:
        """Terminate the episode for every live agent after the current event."""
        self.term_buf[self.live | self._gone] = True
        self._flags_set = True
        self._over = True

    def remove_agent(self, i: int) -> None:
        """Terminate agent ``i`` alone (it leaves ``agents`` after this step).

        With ``black_death=True`` it stays in ``agents`` until the episode ends, observing
        zeros with the no-op mask, and its termination is reported then, with everyone's.
        A decision it was waiting for gets the no-op's value.
        """
        if i in self._left or not self.live[i]:
            return
        self.live[i] = False
        self._left.add(i)
        self._roster_changed = True
        if self._black_death:
            self._gone[i] = True
        else:
            self.term_buf[i] = True
            self._flags_set = True
        pending = self._pending.pop(i, None)
        if pending is not None:
            event, values = pending
            event.succeed(self._value(i, self._noop(), values))
        if not self.live.any():  # nobody is left to decide: the episode is over
            self.term_buf[self._gone] = True
            self._flags_set = True
            self._over = True

    def needs_action(self, i: int) -> bool:
        return i in self._pending

    # ---- array API (the vector backends' protocol: deszoo.core.arrays) -----------------
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
        self._round = None  # the latest every() round (together=True), see _deliver
        self._late_masks = []
        self._closed = False
        self._over = False
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
        self._any_invalid = False
        # A vector env may report the ended episode's flags in these arrays after this
        # reset (same-step autoreset), so the next step clears them.
        self._flags_set = True
        self._build()
        self._advance()
        self.rew_buf[:] = 0.0  # rewards before the first decision belong to no action
        self._finish()

    def step_arrays(self, acts: np.ndarray, missing: np.ndarray | None = None) -> None:
        """Step with one action per possible agent (row ``acts[i]``, padded).

        Actions must already be in the action space; the masks are applied here: only
        the actions of agents at a decision point are read. ``missing`` (bool per agent,
        optional) marks agents that sent no action.
        """
        self._step(acts.tolist() if self._discrete else acts, missing)

    def _step(self, acts: Any, missing: np.ndarray | None) -> None:
        """One step; ``acts`` is a list of ints for ``Discrete`` actions, else an array."""
        if self._over:
            raise ResetNeededError(f"{self.metadata['name']}: episode ended; call reset() first")
        pending = self._pending
        if self._strict:
            self._refuse_invalid(np.asarray(acts), missing)  # before anything changes
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

    # ---- the step's parts -------------------------------------------------------------
    def _deliver(self, pending: dict, acts: Any, missing: np.ndarray | None) -> None:
        """Succeed each pending decision with its agent's action, replacing invalid ones."""
        mask, discrete = self.mask_buf, self._discrete
        self._decisions += len(pending)
        for i in pending:  # hot path: one mask lookup per deciding agent
            legal = mask[i, acts[i]] if discrete else self.rows.legal_row(mask[i], acts[i])
            if not legal or (missing is not None and missing[i]):
                acts = self._replace_invalid(pending, acts, missing)
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
                    a = values(a) if callable(values) else values[a]
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
        while True:
            if self._over:  # the model ended the episode
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
                    self._flush(limit)
                    self._truncate()
                    break
            step()
            count += 1
        self.num_events += count
        if not self._over and self._max_steps is not None and self.num_steps >= self._max_steps:
            self._truncate()

    def _truncate(self) -> None:
        self.trunc_buf[self.live | self._gone] = True
        self._flags_set = True
        self._over = True

    def _finish(self) -> None:
        """Masks of the rows whose decision ended, observations, the roster."""
        over = self._over
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
        self._observe_all(self.obs_buf)
        if over or self._left:
            dead = ~(self.live | (ended & ~self._gone))
            if dead.any():
                self.obs_buf[dead] = 0.0
        if self._roster_changed or over:  # hot path: else the list is still right
            listed = self.live | self._gone if not over else self.live
            self.agents = [a for a, on in zip(self.possible_agents, listed, strict=True) if on]
            self._listed = set(self.agents)
            self._roster_changed = False

    # ---- helpers ----------------------------------------------------------------------
    def _open_round(self, who: list[int], mask: Callable[[int], Any] | None,
                    values: Callable[[int], Any] | None) -> _Round:
        """The decisions of one ``every`` round (``together=True``), as :meth:`decide`
        would register them one by one; each agent waits on its slot of the round."""
        round_ = _Round(self.sim, who)
        pending = self._pending
        for i in who:
            self._check_live(i)
            if mask is not None:
                self._set_mask(i, mask(i))
            pending[i] = (_Slot(round_, i), None if values is None else values(i))
        if mask is None:  # the full masks, one write for the round
            if len(round_.values) == len(self._full_mask_rows):  # (every row)
                self.mask_buf[:] = self._full_mask_rows
            else:
                self.mask_buf[who] = self._full_mask_rows[who]
        masked = self._masked
        if not masked.issuperset(who):  # (else their rows already say they decide)
            self.needs_buf[who] = True
            masked.update(who)
        self._round = round_
        return round_

    def _check_live(self, i: int) -> None:
        if i in self._left:
            raise RuntimeError(f"agent {self.possible_agents[i]!r} has left; it cannot decide")

    def _set_mask(self, i: int, mask: Any) -> None:
        """Agent ``i``'s mask (as :meth:`decide` takes it): written now, or ``mask()`` when
        the step ends."""
        if mask is None:
            self.mask_buf[i] = self._full_masks[i]
        elif callable(mask):
            self._late_masks.append((i, mask))
        else:
            self._write_mask(i, mask)

    def _write_mask(self, i: int, mask: Any) -> None:
        masks = self.mask_buf
        masks[i] = mask
        if not np.count_nonzero(masks[i]):
            raise RuntimeError(
                f"model bug: agent {self.possible_agents[i]!r} got an all-zero mask"
            )

    def _value(self, i: int, action: Any, values: Any) -> Any:
        """What the model receives for agent ``i``'s ``action`` (see :meth:`decide`)."""
        if self._discrete:  # hot path: the common case, no padding to strip
            if values is None:
                return action
            return values(action) if callable(values) else values[action]
        action = self.rows.unpad(i, action)
        if values is None:
            return action
        return values(action) if callable(values) else values[int(action)]

    def _noop(self) -> Any:
        """The no-op action (a fresh one: the model may keep what it is given)."""
        return NOOP if self._discrete else self.rows.zero_actions()[0]

    def _replace_invalid(self, pending: dict, acts: Any, missing: np.ndarray | None) -> Any:
        """A random legal action for each deciding agent whose action is masked out or
        missing (drawn in row order from the episode's fallback generator)."""
        mask = self.mask_buf
        bad = sorted(i for i in pending if (missing is not None and missing[i])
                     or not self.rows.legal_row(mask[i], acts[i]))
        if self._fallback_rng is None:
            self._fallback_rng = np.random.default_rng(self._episode_seq.spawn(1)[0])
        acts = acts.copy()
        penalty = self._invalid_penalty
        for i in bad:
            acts[i] = self.rows.fallback(i, mask[i], self._fallback_rng)
            if self._discrete:
                acts[i] = int(acts[i])
            self.invalid_buf[i] = True
            self.invalid_count[i] += 1
            self.rew_buf[i] -= penalty
        self._flags_set = self._any_invalid = True
        self._replaced += len(bad)
        if self._replaced >= MASK_WARNING_SHARE * self._decisions >= (
                MASK_WARNING_SHARE * MASK_WARNING_AFTER):
            self._warn_masks_ignored()
        return acts

    def _warn_masks_ignored(self) -> None:
        name = self.metadata["name"]
        if name in _WARNED or os.environ.get("DESZOO_WARN_MASKS", "1") == "0":
            return
        _WARNED.add(name)
        warnings.warn(
            f"{name}: {self._replaced} of the {self._decisions} actions of agents at a "
            f"decision point ({self._replaced / self._decisions:.0%}) were masked out and "
            "replaced by random legal actions: the policy is not reading the masks "
            "(infos[agent]['action_mask'], or mask_in_obs=True). See "
            f"{doc('compatibility.md#masks')}. Silence: warnings.filterwarnings('ignore', "
            "category=deszoo.errors.MasksIgnoredWarning), or DESZOO_WARN_MASKS=0 for every "
            "process.", MasksIgnoredWarning, stacklevel=6)  # (the caller of step)

    def _refuse_invalid(self, acts: np.ndarray, missing: np.ndarray | None) -> None:
        """Strict mode, in row order: a missing action of a deciding agent raises
        ``MissingActionError``, any masked-out action ``MaskedActionError`` (also a
        non-no-op action of an agent that is not deciding)."""
        legal = self.rows.legal(self.mask_buf, acts, np.arange(len(self.possible_agents)))
        if missing is not None:
            legal &= ~missing
        for i in np.flatnonzero(~legal).tolist():
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

    def _legal(self, i: int) -> list[int]:
        return np.flatnonzero(self.mask_buf[i]).tolist()


class _Round:
    """The decisions of one :meth:`Stepper.every` round (``together=True``); ``event``
    succeeds once all are in, with ``values`` (agent -> value, in the round's order).

    Each agent waits on a :class:`_Slot`. When the round's agents are the only ones
    deciding, the step hands in all their values at once (:meth:`deliver`): one SimPy event
    instead of one per agent plus ``sim.all_of`` of them. Otherwise each value comes as an
    event of its own, processed among the other decisions, and ``event`` succeeds when the
    last of them is processed, where ``all_of`` would.
    """

    __slots__ = ("sim", "event", "values", "left", "moving")

    def __init__(self, sim: simpy.Environment, who: list[int]):
        self.sim = sim
        self.event = simpy.Event(sim)
        self.values: dict[int, Any] = dict.fromkeys(who)
        self.left = len(self.values)  # agents not handed a value yet (slots pending)
        self.moving = 0  # values handed in one by one whose event is not processed yet

    def deliver(self, values: dict[int, Any]) -> None:
        """The values of every agent still waiting, at once (none is moving)."""
        self.values.update(values)
        self.left = 0
        self.event.succeed()


class _Slot:
    """One agent's place in a :class:`_Round`; ``succeed(value)`` as on a decision event."""

    __slots__ = ("round", "i")

    def __init__(self, round_: _Round, i: int):
        self.round, self.i = round_, i

    def succeed(self, value: Any) -> None:
        r = self.round
        r.left -= 1
        r.moving += 1
        event = simpy.Event(r.sim)
        event.callbacks.append(self._arrived)
        event.succeed(value)

    def _arrived(self, event: simpy.Event) -> None:
        r = self.round
        r.values[self.i] = event.value
        r.moving -= 1
        if not r.left and not r.moving:
            r.event.succeed()
