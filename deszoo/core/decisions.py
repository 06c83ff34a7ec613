"""What model code calls: decision points, rewards, agents that leave, over the per-agent arrays.

A model waits on :meth:`Decisions.decide` (or an :meth:`Decisions.every` round) where an agent
must decide, adds rewards (:meth:`Decisions.add_reward`), makes agents leave
(:meth:`Decisions.remove_agent`) and ends the episode (:meth:`Decisions.end_episode`).
:class:`Decisions` owns the state these share with the step that drives the model
(:class:`~deszoo.core.stepper.Stepper`, its subclass): the arrays
(:mod:`deszoo.core.arrays`), the pending decisions, the rows whose mask is set, the agents
that left, and whether the episode is over.

Each mask row is written once per step: by :meth:`Decisions.decide` (or an ``every`` round)
for an agent that decides (at the end of the step, for a mask given as a callable), or once
with the no-op mask when its decision ends. ``needs_buf`` is written only when it changes.
The set ``_masked`` holds the rows whose mask is not the no-op mask (and whose ``needs_buf``
is set): the agents deciding now, and those that decided during this step.

What the model hands over (masks, rewards, decision values) is checked where the bridge
reads it, only when it goes wrong: the :class:`~deszoo.errors.ModelError` names the agent,
the buffer, and the expected and received shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import simpy
from gymnasium import spaces

from deszoo.core.arrays import allocate
from deszoo.core.groups import AgentRows
from deszoo.errors import ConfigError, ModelError

__all__ = ["Decisions", "NOOP"]

NOOP = 0
_MODEL_ERRORS = (ValueError, TypeError, IndexError, KeyError)  # numpy's, on a bad input


class Decisions:
    """The API for model code and the state it shares with the step (module docstring).

    Args:
        name: the scenario's name, for messages.
        rows: the agents' row layout (:class:`~deszoo.core.groups.AgentRows`).
        black_death: agents that leave stay listed until the episode ends.
    """

    def __init__(self, name: str, rows: AgentRows, black_death: bool):
        self._name = name
        self.rows = rows
        n = len(rows.names)
        self.possible_agents: list[str] = list(rows.names)
        self._discrete = rows.type is spaces.Discrete
        self._mask_dim = rows.mask_dim
        self._black_death = black_death
        allocate(self, rows)  # the per-agent arrays (deszoo.core.arrays)
        self._gone = np.zeros(n, dtype=bool)  # left, but listed until the end (black_death)
        self._noop_mask = rows.noop_mask()
        self._full_masks = [rows.full_mask(i) for i in range(n)]
        self._full_mask_rows = np.array(self._full_masks)  # (one write for an every() round)
        self.sim: simpy.Environment | None = None
        self._pending: dict[int, tuple[Any, Any]] = {}  # row -> (decision event, values)
        self._round: _Round | None = None  # the latest every() round, see Stepper._deliver
        self._late_masks: list = []  # (row, mask()) of masks computed when the step ends
        self._masked: set[int] = set()  # rows whose mask is not the no-op mask
        self._left: set[int] = set()  # rows of agents that left this episode
        self._roster_changed = False  # an agent left or the episode started: rebuild agents
        self._flags_set = False  # term, trunc or invalid flags set since the step began
        # True once the episode has terminated or truncated (``reset`` is needed). A plain
        # attribute, not a property: the vector layer reads it for every env step.
        self.episode_over = True

    # ---- API for model code -----------------------------------------------------------
    @property
    def now(self) -> float:
        return 0.0 if self.sim is None else float(self.sim.now)

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
            try:
                self.mask_buf[i] = self._full_masks[i]  # (a list of rows: no view to make)
            except (IndexError, TypeError) as exc:
                raise ModelError(f"{self._name}: decide({i!r}): agent "
                                 f"{self._agent_name(i)}") from exc
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
        try:
            self.rew_buf[i] += value
        except _MODEL_ERRORS as exc:
            raise self._bad_reward(i, value) from exc

    def end_episode(self) -> None:
        """Terminate the episode for every live agent after the current event."""
        self.term_buf[self.live | self._gone] = True
        self._flags_set = True
        self.episode_over = True

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
            self.episode_over = True

    def needs_action(self, i: int) -> bool:
        return i in self._pending


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
        try:
            k = len(mask)  # (a one-entry mask would broadcast over the row unchecked)
            if k == self._mask_dim:
                masks[i] = mask
            elif self._discrete and k == self.rows.n[i]:  # its own actions, among wider kinds
                masks[i, :k] = mask
                masks[i, k:] = 0
            else:
                raise ValueError(k)
        except _MODEL_ERRORS as exc:
            raise self._bad_mask(i, mask) from exc
        if not np.count_nonzero(masks[i]):
            raise RuntimeError(
                f"model bug: agent {self.possible_agents[i]!r} got an all-zero mask"
            )

    def _value(self, i: int, action: Any, values: Any) -> Any:
        """What the model receives for agent ``i``'s ``action`` (see :meth:`decide`)."""
        if self._discrete:  # hot path: the common case, no padding to strip
            if values is None:
                return action
            key = action
        else:
            action = self.rows.unpad(i, action)
            if values is None:
                return action
            key = int(action) if not callable(values) else action
        if callable(values):
            return values(key)
        try:
            return values[key]
        except (IndexError, KeyError) as exc:
            raise self._bad_values(i, key, values) from exc

    def _noop(self) -> Any:
        """The no-op action (a fresh one: the model may keep what it is given)."""
        return NOOP if self._discrete else self.rows.zero_actions()[0]

    # ---- what the model handed over, when it does not fit (issue: name everything) ----
    def _has_row(self, i: Any) -> bool:
        try:
            self.possible_agents[i]
        except (IndexError, TypeError):
            return False
        return True

    def _agent_name(self, i: Any) -> str:
        if self._has_row(i):
            return repr(self.possible_agents[i])
        return f"<no agent at row {i!r}; rows are 0..{len(self.possible_agents) - 1}>"

    def _bad_mask(self, i: int, mask: Any) -> ModelError:
        rows = self.rows
        width = rows.mask_dim
        own = rows.groups[rows.kind[i]].action
        if self._discrete and int(own.n) != width:
            expected = (f"{int(own.n)} entries of 0/1 (its action space {own}), or {width} "
                        "(padded with zeros to its row)")
        else:
            expected = f"{width} entries of 0/1 (shape ({width},): its action space {own})"
        return ModelError(
            f"{self._name}: the mask for agent {self._agent_name(i)} does not fit its row of "
            f"mask_buf: expected {expected}, received {_shape(mask)}: {mask!r}"
        )

    def _bad_reward(self, i: Any, value: Any) -> ModelError:
        what = f"{self._name}: add_reward({i!r}, {value!r}) for agent {self._agent_name(i)}"
        if not self._has_row(i):
            return ModelError(what)
        return ModelError(f"{what}: rew_buf holds one number per agent (expected a scalar of "
                          f"shape (), received {_shape(value)})")

    def _bad_values(self, i: int, action: Any, values: Any) -> ModelError:
        return ModelError(
            f"{self._name}: agent {self._agent_name(i)} chose action {action!r}, but the "
            f"values given to decide() have no entry for it (received {_shape(values)}: "
            f"{values!r}); values[action] must exist for every action the mask allows"
        )




def _shape(value: Any) -> str:
    """What the model handed over, for messages: its shape or its type."""
    try:
        shape = np.shape(value)
    except Exception:  # noqa: BLE001 (a ragged list, or anything numpy cannot read)
        return f"a {type(value).__name__}"
    if shape == ():
        return f"a {type(value).__name__}"
    return f"shape {shape}"


class _Round:
    """The decisions of one :meth:`Decisions.every` round (``together=True``); ``event``
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
