"""A fuzz of scenario parameters: every parameter of every registered scenario at the edge.

The project's own test machinery (not part of the package): ``tests/test_fuzz_params.py``
runs one value at a time over every parameter, ``benchmarks/fuzz_params.py`` also random
combinations of several, for as long as you like.

A case is a scenario and some keyword arguments. :func:`run_case` builds it, resets it and
steps it with random legal actions (or the scenario's heuristic) for a number of steps, and
returns an :class:`Outcome`. A case passes when it is either

* refused with a ``ConfigError`` whose message names the argument with its value
  (``key=``; of several, one it refuses), or
* built, and steps that many steps (or to the end of its episode) with finite
  observations, rewards and state, each step within :data:`EVENTS_PER_STEP` SimPy events,
  the whole case within a wall-clock watchdog (a hang guard, far above what a case takes).
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import deszoo
from deszoo.errors import ConfigError

# The edge values of the issue (37, item 5): the smallest positive float, zero, negatives,
# huge numbers, NumPy integer types past a bound once they wrap, non-finite numbers, bools,
# floats where an int is expected.
VALUES: tuple[Any, ...] = (
    5e-324, -5e-324, 0, 0.0, -0.0, -1, -1.0, 1, 2, 2.0, 2.5, 1e-300, 1e-9, 1e300, 10**18,
    2**63, 2**64, np.uint8(255), np.uint8(0), np.int8(-1), np.int16(300), np.int64(2**62),
    np.uint64(2**64 - 1), np.float32(1e-45), np.float64(5e-324), math.nan, math.inf,
    -math.inf, True, False, np.bool_(True), None,
)
# SimPy events in one step: a runaway past this. Bounded configs come close only together
# (traffic, 3,600 s ticks at the highest demand over 32 intersections: 1.2M); one value
# alone stays under 35,000 (warehouse, aisle_length=1000).
EVENTS_PER_STEP = 2_000_000
WATCHDOG = 60.0  # seconds for one case: a hang guard, not a speed test


def params_of(name: str) -> dict:
    """Scenario ``name``'s declared parameters (the bridge's included)."""
    cls = deszoo.env_module(name).parallel_env
    return getattr(cls, "func", cls).all_params()


def values_for(param) -> list[Any]:
    """:data:`VALUES`, the parameter's documented bounds and, for a tuple parameter, tuples
    holding each value (all of them, the first, the last, alone), one too long, empty."""
    values = list(VALUES)
    values += [b for b in getattr(param.check, "bounds", (None, None)) if b is not None]
    default = param.default
    if isinstance(default, tuple):
        for v in VALUES:
            values += [(v,) * len(default), (v, *default[1:]), (*default[:-1], v), (v,)]
        values += [(*default, default[-1]), ()]
    return values


def single_cases(names: list[str] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(scenario, {key: value})`` for every parameter of every scenario and each of its
    :func:`values_for`."""
    for name in names or deszoo.list_envs():
        for key, param in params_of(name).items():
            for value in values_for(param):
                yield name, {key: value}


@dataclass
class Outcome:
    """What a case did: ``kind`` is ``refused`` (a ConfigError that names the arguments),
    ``ran`` or a failure (``unnamed``, ``error``, ``nonfinite``, ``runaway``, ``hang``)."""

    kind: str
    detail: str = ""
    steps: int = 0
    max_events: int = 0  # most SimPy events in one step
    seconds: float = 0.0
    phase: str = "make"  # where it was: make, reset, step or close

    @property
    def ok(self) -> bool:
        return self.kind in ("refused", "ran")


class _Hang(BaseException):  # not an Exception: the env's own handlers must not catch it
    pass


def _alarm(signum, frame):
    raise _Hang


def _names_one(message: str, kwargs: dict[str, Any]) -> bool:
    """Whether ``message`` names an argument with its value (``key=``); one argument: that
    one, several: one of them (an error is about the value it refuses)."""
    return any(f"{key}=" in message for key in kwargs if key != "preset")


def run_case(name: str, kwargs: dict[str, Any], steps: int = 50, policy: str = "random",
             seed: int = 0, watchdog: float = WATCHDOG) -> Outcome:
    """Build scenario ``name`` with ``kwargs``, reset it with ``seed`` and step it ``steps``
    times (random legal actions, or ``policy="heuristic"``) under a ``watchdog`` (seconds,
    ``SIGALRM``: the main thread only)."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, watchdog)
    start = time.perf_counter()
    out = Outcome("ran")
    try:
        try:
            env = deszoo.make(name, **kwargs)
        except ConfigError as err:
            out.kind = "refused" if _names_one(str(err), kwargs) else "unnamed"
            out.detail = str(err)
            return out
        try:
            out = _play(env, name, steps, policy, seed, out)
        finally:
            env.close()
    except _Hang:
        out.kind, out.detail = "hang", f"over {watchdog:g} s (after {out.steps} steps)"
    except Exception as err:  # noqa: BLE001 - the fuzz reports every other failure
        where = f"step {out.steps + 1}" if out.phase == "step" else out.phase
        out.kind, out.detail = "error", f"{where}: {type(err).__name__}: {err}"[:300]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        out.seconds = time.perf_counter() - start
    return out


def _play(env, name: str, steps: int, policy: str, seed: int, out: Outcome) -> Outcome:
    rng = np.random.default_rng(seed)
    rows = env.rows
    heuristic = deszoo.env_module(name).heuristic if policy == "heuristic" else None
    acts = rows.zero_actions()
    out.phase = "reset"
    env.reset_arrays(seed)
    out.max_events = env.num_events
    out.phase = "step"
    for _ in range(steps + 1):
        for what, values in (("observations", env.obs_buf), ("rewards", env.rew_buf)):
            if not np.isfinite(values).all():
                out.kind, out.detail = "nonfinite", f"{what} after {out.steps} steps"
                return out
        if out.max_events > EVENTS_PER_STEP:
            out.kind = "runaway"
            out.detail = f"{out.max_events:,} SimPy events in one step (step {out.steps})"
            return out
        if env.episode_over or out.steps == steps:
            break
        mask = env.mask_buf
        if heuristic is not None:
            for i in range(len(acts)):
                acts[i] = heuristic(env.obs_buf[i], mask[i])
        elif rows.type.__name__ == "Discrete":  # a uniformly random legal action per row
            acts[:] = (rng.random(mask.shape) * mask).argmax(axis=1)
        else:
            for i in range(len(acts)):
                acts[i] = rows.fallback(i, mask[i], rng)
        before = env.num_events
        env.step_arrays(acts)
        out.steps += 1
        out.max_events = max(out.max_events, env.num_events - before)
    out.phase = "state"
    if not np.isfinite(env.state()).all():
        out.kind, out.detail = "nonfinite", f"state after {out.steps} steps"
    out.phase = "close"
    return out
