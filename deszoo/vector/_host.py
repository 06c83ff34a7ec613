"""What every worker runs beside its envs: the buffer layout and :class:`EnvGroup`, a few
consecutive envs that run commands in place, writing into their rows of the batch buffers.
Every backend steps its envs through this one path, which makes them bit-identical.
"""

from __future__ import annotations

import gc
import operator
import threading
import traceback
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from deszoo.core.arrays import AGENT_ARRAYS
from deszoo.errors import InvalidActionError, MissingActionError, UnknownAgentError

__all__ = ["Layout", "Buffers", "EnvGroup", "EnvFailure", "restart_seed", "GC_YOUNG"]

# Per-row fields in memory order: name, trailing shape key, dtype (None: the action's).
ROW_FIELDS: tuple[tuple[str, str, Any], ...] = (
    *((name, trailing, dtype) for name, dtype, trailing in AGENT_ARRAYS.values()),
    ("final_obs", "d", np.float32),
    ("act", "a", None),
    ("final", "", np.bool_),
    ("final_count", "", np.int32),
)
# Per-env fields: the clock, SimPy events so far, the clock when the last episode ended.
SIM_FIELDS: tuple[tuple[str, Any], ...] = (
    ("sim_time", np.float64), ("events", np.int64), ("final_time", np.float64),
)
# Per-env global state (``state=True``; 0 wide when off): now, and at the last episode end.
STATE_FIELDS = ("state", "final_state")
# The env attribute each adopted row buffer replaces.
ENV_ATTRS = {name: attr for attr, (name, _, _) in AGENT_ARRAYS.items()}
_env_arrays = operator.attrgetter(*ENV_ATTRS.values())  # an env's buffers, in one call
ALIGN = 64
# What a same-step reset keeps of the step that ended the episode.
SAME_STEP_KEEP = ("rew", "term", "trunc", "invalid")
# Exceptions a step raises before it changes anything: the caller's bad input.
INPUT_ERRORS = (InvalidActionError, MissingActionError, UnknownAgentError)


@dataclass(frozen=True)
class Layout:
    """Shapes of the batch buffers: ``num_sims`` envs of ``n_agents`` padded rows each."""

    num_sims: int
    n_agents: int
    obs_dim: int
    mask_dim: int
    act_shape: tuple[int, ...] = ()
    act_dtype: str = "int64"
    state_dim: int = 0

    @property
    def rows(self) -> int:
        return self.num_sims * self.n_agents

    def fields(self) -> list[tuple[str, tuple[int, ...], Any]]:
        dims = {"d": (self.obs_dim,), "k": (self.mask_dim,), "a": self.act_shape, "": ()}
        out = [(name, (self.rows, *dims[key]), np.dtype(self.act_dtype) if dt is None else dt)
               for name, key, dt in ROW_FIELDS]
        out += [(name, (self.num_sims,), dt) for name, dt in SIM_FIELDS]
        out += [(name, (self.num_sims, self.state_dim), np.float32) for name in STATE_FIELDS]
        return out

    def nbytes(self) -> int:
        total = 0
        for _, shape, dt in self.fields():
            total += -total % ALIGN
            total += int(np.prod(shape)) * np.dtype(dt).itemsize
        return total + ALIGN


class Buffers:
    """Numpy views of the batch buffers over ``memory`` (shared) or private memory;
    ``fresh`` (the owner, once) gives every row a dead row's no-op mask."""

    def __init__(self, layout: Layout, memory: Any = None, fresh: bool = True):
        self.layout = layout
        if memory is None:
            memory = bytearray(layout.nbytes())
        raw = np.frombuffer(memory, dtype=np.uint8)
        offset = -raw.ctypes.data % ALIGN
        for name, shape, dt in layout.fields():
            offset += -offset % ALIGN
            size = int(np.prod(shape)) * np.dtype(dt).itemsize
            view = raw[offset : offset + size].view(dt).reshape(shape)
            setattr(self, name, view)
            offset += size
        if fresh:  # before the first reset every row is dead (the envs set their own no-op
            self.mask[:, 0] = 1  # masks when a group adopts its rows)

    # Attribute declarations for type checkers.
    obs: np.ndarray
    final_obs: np.ndarray
    mask: np.ndarray
    act: np.ndarray
    rew: np.ndarray
    term: np.ndarray
    trunc: np.ndarray
    live: np.ndarray
    needs: np.ndarray
    final: np.ndarray
    invalid: np.ndarray
    invalid_count: np.ndarray
    sim_time: np.ndarray
    events: np.ndarray
    state: np.ndarray
    final_state: np.ndarray


@dataclass
class EnvFailure:
    """An env's exception (picklable); ``intact``: raised before it changed anything
    (bad input), so the env goes on; otherwise it is rebuilt."""

    env_index: int
    error_type: str
    message: str
    traceback: str
    intact: bool = False


@dataclass(frozen=True)
class Call:
    """A ``"call"`` command: ``kind`` ``"get"``, ``"set"`` (``values``: one per env of
    ``sims``) or ``"call"``."""

    kind: str
    name: str
    sims: tuple[int, ...]
    args: tuple = ()
    kwargs: dict | None = None
    values: tuple = ()


def restart_seed(seed: int | None, restarts: int) -> int | None:
    """Seed of a rebuilt env's first episode: fresh, but reproducible when ``seed`` is."""
    if seed is None:
        return None
    state = np.random.SeedSequence([int(seed) & (2**64 - 1), 0x5EED, restarts])
    return int(state.generate_state(1, np.uint32)[0])


# While any EnvGroup is open in a process, the young GC threshold is at least this (the
# caller's is restored after): with envs stepped in turn, one env's young objects were
# walked at every other's collection. traffic_v0 large, 8 envs: 4,490 -> 3,560 us per env
# step; warehouse_v0 small, 160k steps: 54 -> 57 MB peak RSS.
GC_YOUNG = 20_000


class GcHold:
    """Holders of the raised threshold, and the caller's to give back after the last."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.saved: tuple[int, int, int] | None = None

    def hold(self) -> None:
        with self.lock:
            young, *older = gc.get_threshold()
            if young < GC_YOUNG:  # first holder, or the caller lowered it since: theirs is kept
                self.saved = (young, *older)
                gc.set_threshold(GC_YOUNG, *older)
            self.holders += 1

    def release(self) -> None:
        with self.lock:
            self.holders -= 1
            if self.holders == 0 and self.saved is not None:
                if gc.get_threshold() == (GC_YOUNG, *self.saved[1:]):  # nobody changed it
                    gc.set_threshold(*self.saved)
                self.saved = None


GC_HOLD = GcHold()


class EnvGroup:
    """Envs ``first .. first + count - 1`` of a vector env, run in place.

    Args:
        factory: builds one env.
        bufs: the batch buffers (the group writes only its own rows).
        first: index of the first env.
        count: number of envs.
        reset_seeds: if given, each env starts needing a reset with its seed (a replacement).
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        bufs: Buffers,
        first: int,
        count: int,
        reset_seeds: Sequence[int | None] | None = None,
    ):
        self.factory = factory
        self.bufs = bufs
        self.first = first
        self.count = count
        n = bufs.layout.n_agents
        self.n = n
        self.envs = [factory() for _ in range(count)]
        self.views: list[dict[str, np.ndarray]] = []
        self.acts: list[np.ndarray] = []  # env k's actions: its rows of bufs.act
        for k, env in enumerate(self.envs):
            lo = (first + k) * n
            views = {name: getattr(bufs, name)[lo : lo + n] for name in ENV_ATTRS}
            self.views.append(views)
            self.acts.append(bufs.act[lo : lo + n])
            self._adopt(env, views)
        self._own = [tuple(v.values()) for v in self.views]  # as _env_arrays lists them
        self.rows = slice(first * n, (first + count) * n)
        self.with_state = bufs.layout.state_dim > 0  # write each env's state after it moves
        self.need_reset = [reset_seeds is not None] * count
        self.next_seed: list[int | None] = list(reset_seeds or [None] * count)
        # Attributes set with a "set" call, re-applied to an env that is rebuilt.
        self.attrs: list[dict[str, Any]] = [{} for _ in range(count)]
        GC_HOLD.hold()
        # Released by close(), or when a leaked group is collected.
        self._release_gc = weakref.finalize(self, GC_HOLD.release)

    @staticmethod
    def _adopt(env: Any, views: dict[str, np.ndarray]) -> None:
        # Hot-path shortcut: the env writes its results straight into the batch buffers
        # (the bridge only ever writes its per-agent arrays in place), so no copy per step.
        for name, attr in ENV_ATTRS.items():
            view = views[name]
            view[...] = getattr(env, attr)
            setattr(env, attr, view)

    def _sync(self, k: int) -> None:
        """Copy back any buffer a scenario rebound instead of writing in place."""
        env = self.envs[k]
        if not all(map(operator.is_, _env_arrays(env), self._own[k])):
            self._adopt(env, self.views[k])

    # ---- commands ---------------------------------------------------------------------
    def run(self, command: str, payload: Any = None) -> tuple[list[EnvFailure], Any]:
        """Run ``"step"``, ``"reset"``, ``"call"`` or ``"rebuild"``; ``(failures, value)``.
        Env exceptions never escape."""
        if command == "step":
            return self.step(bool(payload)), None
        if command == "reset":
            seeds, which = payload
            return self.reset(seeds, which), None
        if command == "call":
            return self.call(payload)
        if command == "rebuild":
            seeds, reset_now = payload
            return self.rebuild_many(seeds, reset_now), None
        raise ValueError(f"unknown command {command!r}")

    def _reset_one(self, k: int, seed: int | None) -> None:
        env = self.envs[k]
        self.need_reset[k] = False
        self.next_seed[k] = None
        env.reset_arrays(seed)
        self._sync(k)
        s = self.first + k
        self.bufs.sim_time[s] = env.now
        self.bufs.events[s] += env.num_events
        if self.with_state:
            env.write_state(self.bufs.state[s])

    def reset(
        self, seeds: Sequence[int | None], which: Sequence[bool] | None = None
    ) -> list[EnvFailure]:
        """Reset the group's envs (``seeds[k]`` for env ``first + k``; only where
        ``which[k]`` when given)."""
        failures = []
        n = self.n
        for k in range(self.count):
            if which is not None and not which[k]:
                continue
            lo = (self.first + k) * n
            self.bufs.final[lo : lo + n] = False
            try:
                self._reset_one(k, seeds[k])
            except Exception as exc:
                failures.append(self._failure(k, exc))
        return failures

    def step(self, same_step: bool = False) -> list[EnvFailure]:
        """Step every env with ``bufs.act``; autoreset ended envs: next step (an ended
        env is reset instead of stepped) or ``same_step`` (reset at once, its final
        observation in ``bufs.final_obs``)."""
        bufs = self.bufs
        acts = self.acts
        n = self.n
        bufs.final[self.rows] = False
        failures = []
        for k, env in enumerate(self.envs):
            lo = (self.first + k) * n
            try:
                if self.need_reset[k] or env.episode_over:
                    self._reset_one(k, self.next_seed[k])
                    continue
                before = env.num_events
                env.step_arrays(acts[k])
                if not all(map(operator.is_, _env_arrays(env), self._own[k])):  # _sync, inlined
                    self._adopt(env, self.views[k])
                s = self.first + k
                bufs.events[s] += env.num_events - before
                bufs.sim_time[s] = env.now
                if self.with_state:
                    env.write_state(bufs.state[s])
                if same_step and env.episode_over:
                    self._same_step_reset(k, lo)
            except Exception as exc:
                failure = self._failure(k, exc)
                if failure.intact:  # nothing happened in this env: no reward, no ending
                    bufs.rew[lo : lo + n] = 0.0
                    bufs.term[lo : lo + n] = False
                    bufs.trunc[lo : lo + n] = False
                failures.append(failure)
        return failures

    def _same_step_reset(self, k: int, lo: int) -> None:
        bufs, hi = self.bufs, lo + self.n
        bufs.final_obs[lo:hi] = bufs.obs[lo:hi]
        bufs.final[lo:hi] = True
        bufs.final_count[lo:hi] = bufs.invalid_count[lo:hi]
        bufs.final_time[self.first + k] = bufs.sim_time[self.first + k]
        if self.with_state:
            bufs.final_state[self.first + k] = bufs.state[self.first + k]
        rows = slice(lo, hi)
        done = [getattr(bufs, f)[rows].copy() for f in SAME_STEP_KEEP]
        self._reset_one(k, None)
        for f, value in zip(SAME_STEP_KEEP, done, strict=True):
            getattr(bufs, f)[rows] = value

    def call(self, call: Call) -> tuple[list[EnvFailure], list[Any]]:
        """Get, set or call attribute ``call.name`` of envs ``call.sims``."""
        failures, values = [], []
        for j, sim in enumerate(call.sims):
            k = sim - self.first
            env = self.envs[k]
            try:
                if call.kind == "set":
                    setattr(env, call.name, call.values[j])
                    self.attrs[k][call.name] = call.values[j]
                    values.append(None)
                    continue
                value = getattr(env, call.name)
                if call.kind == "call" and callable(value):
                    value = value(*call.args, **(call.kwargs or {}))
                    self._sync(k)
                values.append(value)
            except Exception as exc:
                failures.append(self._failure(k, exc, intact=True))
                values.append(None)
        return failures, values

    def rebuild_many(self, seeds: dict[int, int | None], reset_now: bool) -> list[EnvFailure]:
        """Replace envs (batch-wide index -> seed of their next reset) by fresh ones, with
        the attributes ``set`` on them; reset them now with ``reset_now``."""
        failures = []
        for sim, seed in seeds.items():
            k = sim - self.first
            try:
                try:
                    self.envs[k].close()
                except Exception:  # a broken env may fail to close; it is dropped anyway
                    pass
                env = self.envs[k] = self.factory()
                for name, value in self.attrs[k].items():
                    setattr(env, name, value)
                self._adopt(env, self.views[k])
                self.need_reset[k] = True
                self.next_seed[k] = seed
                if reset_now:
                    self._reset_one(k, seed)
            except Exception as exc:
                failures.append(self._failure(k, exc))
        return failures

    def _failure(self, k: int, exc: BaseException, intact: bool | None = None) -> EnvFailure:
        if intact is None:
            intact = isinstance(exc, INPUT_ERRORS)
        if not intact:
            self.need_reset[k] = True
        return EnvFailure(
            env_index=self.first + k,
            error_type=type(exc).__name__,
            message=str(exc),
            traceback=traceback.format_exc(),
            intact=intact,
        )

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:  # closing must not fail because one env is broken
                pass
        self._release_gc()
