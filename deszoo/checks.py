"""``deszoo check``: is an env ready to be sampled in parallel?

``check(env_fn)`` (or ``deszoo check MODULE:ATTR``) takes a class or zero-argument factory
of a PettingZoo ``ParallelEnv`` (a deszoo scenario or any other) and runs, each with a
verdict:

==================  =====================================================================
builds              ``env_fn()`` returns a ``ParallelEnv`` with ``possible_agents``
episode ends        an episode under random legal actions ends (terminates or truncates)
                    within :data:`EPISODE_STEPS` steps and :data:`EPISODE_SECONDS` seconds,
                    whichever comes first; a step that does not return within that time
                    fails too (and the checks after it are skipped)
spaces              ``observation_space(a)`` and ``action_space(a)`` return the same object
                    on every call (PettingZoo requires it; seeding a space relies on it)
pettingzoo api      PettingZoo's ``parallel_api_test``
pettingzoo seed     PettingZoo's ``parallel_seed_test``
observations        a whole episode under random legal actions: every observation in its
                    space, finite; every agent that must decide has a legal action
determinism         the same seed gives the same episode, also after the global random
                    state (``random``, ``numpy.random``) is changed (global RNG use shows
                    here); another seed gives another episode
pickle              the env pickles (as a worker needs), and the copy replays the episode
vector              ``make_vec`` on ``roundrobin``, ``shm`` and ``supersuit`` (2 workers):
                    the same bytes, step for step
==================  =====================================================================
"""

from __future__ import annotations

import functools
import importlib
import os
import pickle
import random
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np
import pettingzoo
import simpy

from deszoo.rollouts import random_action

__all__ = ["EPISODE_SECONDS", "EPISODE_STEPS", "Verdict", "build", "check", "load"]

EPISODE_STEPS = 100_000
"""``deszoo check``: an episode not over after this many steps fails "episode ends"."""

EPISODE_SECONDS = 20.0
"""``deszoo check``: an episode not over after this much wall time fails "episode ends"."""


@dataclass
class Verdict:
    """One check: its name, whether it passed, and what was found."""

    name: str
    ok: bool
    detail: str = ""


class CheckFailed(Exception):
    """A check found a problem (its message says which)."""


class StepHangs(CheckFailed):
    """A single ``reset`` or ``step`` did not return in time: later checks would hang too."""


class _Alarm(BaseException):
    """Raised by the watchdog's signal inside a call that runs too long (a BaseException,
    so that the model's own ``except Exception`` does not swallow it)."""


def _never_ends_fix(env: Any) -> str:
    """How to give ``env`` an end, in the words of its kind of env."""
    from deszoo.core import SimPyParallelEnv

    if isinstance(env, SimPyParallelEnv):
        return ("give the env a `max_time` (in its params: \"max_time\": "
                "COMMON[\"max_time\"].with_default(...), or max_time=... when you build it) "
                "or a `max_steps`, or end the episode from the model (self.end_episode())")
    return ("return terminations or truncations (e.g. truncate every agent once a "
            "`max_time` of simulated time or a number of steps has passed)")


def _clock(env: Any) -> str:
    now = getattr(env, "now", None)
    return "" if now is None else f", simulated time {float(now):.6g}"


def _watchdog(seconds: float):
    """A context in which a call running past ``seconds`` raises :class:`_Alarm` (SIGALRM;
    only in the main thread of a POSIX process, else it watches nothing)."""
    import contextlib
    import signal
    import threading

    if not hasattr(signal, "setitimer") or (threading.current_thread()
                                            is not threading.main_thread()):
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def armed():
        def ring(signum, frame):
            raise _Alarm

        old = signal.signal(signal.SIGALRM, ring)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)

    return armed()


def _hang_message(what: str, seconds: float, env: Any) -> str:
    return (f"{what} did not return within {seconds:g} s{_clock(env)}: the simulation runs "
            "without reaching a decision point or an end (e.g. a process that loops without "
            f"yielding a timeout, or events but no decisions); {_never_ends_fix(env)}")


def _check_ends(env_fn: Callable[[], Any], seed: int, max_steps: int,
                max_seconds: float) -> str:
    """Play one episode under random legal actions until it ends or a bound is reached."""
    import time

    env = env_fn()
    rng = np.random.default_rng(2)
    n = 0
    what, limit = "reset", max_seconds + 1.0  # a single call that never returns
    start = time.perf_counter()
    try:
        with _watchdog(limit):
            obs, infos = env.reset(seed=seed)
        while env.agents:
            spent = time.perf_counter() - start
            if n >= max_steps or spent >= max_seconds:
                bound = f"{n} steps" if n >= max_steps else f"{spent:.2g} s ({n} steps)"
                raise CheckFailed(
                    f"the episode (seed {seed}) had not ended after {bound}{_clock(env)}: "
                    f"the model never ends; {_never_ends_fix(env)}. (Bounds of this "
                    f"check: {max_steps} steps or {max_seconds:g} s, whichever first; "
                    "deszoo check --episode-steps / --episode-seconds change them)"
                )
            what = f"step {n + 1}"
            with _watchdog(limit):  # per call: slow steps that add up are no hang
                obs, _, _, _, infos = env.step(_actions(env, obs, infos, rng))
            n += 1
    except _Alarm:
        raise StepHangs(_hang_message(what, limit, env)) from None
    return f"ended after {n} steps{_clock(env)}"


def load(target: str) -> Callable[[], Any]:
    """``"package.module:attr"`` -> the class or factory it names (current folder on path)."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise ValueError(f"expected MODULE:ATTR (e.g. my_model.env:MyEnv), got {target!r}")
    if module_name.endswith(".py") or os.sep in module_name:
        name = Path(module_name).with_suffix("").as_posix().strip("./").replace("/", ".")
        raise ValueError(f"{module_name!r} is a file path; give the module's import name, "
                         f"run from the folder it is imported from: {name}:{attr}")
    top = module_name.partition(".")[0]
    if top in sys.stdlib_module_names and Path(f"{top}.py").is_file():
        raise ValueError(f"./{top}.py has the name of a standard-library module, which it would "
                         f"hide from Python and deszoo; rename the file (e.g. my_{top}.py)")
    if "" not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {exc}") from None
    except Exception as exc:  # the module itself raised (a SyntaxError, a bug at import)
        where = "" if isinstance(exc, SyntaxError) else _where(exc)  # (it says where)
        raise ValueError(f"importing {module_name!r} raised {type(exc).__name__}: "
                         f"{exc}{where}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{target} is not a class or a zero-argument factory")
    return obj


def _mask_of(obs: Any, info: dict) -> Any:
    """An agent's mask: an array, Gymnasium's tuple of them (``MultiDiscrete``), or None."""
    mask = obs["action_mask"] if isinstance(obs, dict) and "action_mask" in obs else (
        info.get("action_mask"))
    return mask if mask is None or isinstance(mask, tuple) else np.asarray(mask)


def _actions(env: Any, obs: dict, infos: dict, rng: np.random.Generator) -> dict:
    """A random legal action for every agent (from its mask when there is one)."""
    out = {}
    for a in env.agents:
        mask = _mask_of(obs.get(a), infos.get(a, {}) or {})
        out[a] = random_action(env.action_space(a), mask, rng)
    return out


def _episode(env: Any, seed: int, steps: int, action_seed: int = 0) -> list:
    """Everything an episode returns, up to ``steps`` steps, under random legal actions."""
    rng = np.random.default_rng(action_seed)
    obs, infos = env.reset(seed=seed)
    record = [(obs, infos)]
    for _ in range(steps):
        if not env.agents:
            break
        out = env.step(_actions(env, obs, infos, rng))
        obs, infos = out[0], out[4]
        record.append(out)
    return record


def _same(a: Any, b: Any) -> bool:
    from gymnasium.utils.env_checker import data_equivalence

    return data_equivalence(a, b)


def _check_spaces(env: Any) -> str:
    bad = []
    for a in env.possible_agents:
        if env.observation_space(a) is not env.observation_space(a):
            bad.append(f"observation_space({a!r})")
        if env.action_space(a) is not env.action_space(a):
            bad.append(f"action_space({a!r})")
    if bad:
        raise CheckFailed(
            f"{', '.join(bad[:3])} return a new object on every call; cache them (e.g. build "
            "them once in __init__, or @functools.lru_cache)"
        )
    return f"{len(env.possible_agents)} agents"


def _check_observations(env: Any, seed: int, steps: int) -> str:
    rng = np.random.default_rng(1)
    obs, infos = env.reset(seed=seed)
    n = 0
    for n in range(steps + 1):
        for a, o in obs.items():
            space = env.observation_space(a)
            flat = o["observation"] if isinstance(o, dict) and "observation" in o else o
            if isinstance(flat, np.ndarray) and flat.dtype.kind == "f" and not np.isfinite(
                    flat).all():
                raise CheckFailed(f"step {n}: agent {a!r} observes a non-finite value: {o}")
            if not space.contains(o):
                raise CheckFailed(f"step {n}: agent {a!r} observes {o}, outside {space}")
        for a in env.agents:
            info = infos.get(a, {}) or {}
            mask = _mask_of(obs.get(a), info)
            deciding = info.get("needs_action", True)
            allows = (all(np.any(m) for m in mask) if isinstance(mask, tuple)
                      else mask is None or mask.any())
            if deciding and not allows:
                raise CheckFailed(f"step {n}: agent {a!r} must decide but its mask allows "
                                  "nothing")
        if not env.agents or n == steps:
            break
        obs, _, _, _, infos = env.step(_actions(env, obs, infos, rng))
    return f"{n} steps"


# Code an error passes through but is not the author's: report the innermost frame elsewhere.
_HERE = Path(__file__).parent
_LIBRARY = (*(str(Path(m.__file__).parent) + os.sep for m in (simpy, pettingzoo, gymnasium, np)),
            str(_HERE / "core") + os.sep, str(_HERE / "vector") + os.sep, __file__,
            str(_HERE / "episodes.py"),
            os.path.dirname(os.__file__) + os.sep)


def _where(exc: BaseException) -> str:
    """`` (file:line)`` of the innermost frame of the env's own code where ``exc`` arose.

    SimPy re-raises an exception from inside a process as a new one whose ``__cause__`` is
    the original; the original's traceback holds the model's frames.
    """
    while isinstance(exc.__cause__, type(exc)) and exc.__cause__.__traceback__ is not None:
        exc = exc.__cause__
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    own = [f for f in frames if not f.filename.startswith(_LIBRARY)]
    if not own:  # nowhere in the env's code (a factory called with the wrong arguments)
        return ""
    frame = own[-1]
    return f" ({frame.filename.rsplit(os.sep, 1)[-1]}:{frame.lineno})"


def build(env_fn: Callable[[], Any], name: str) -> Any:
    """``env_fn()``, checked to be a PettingZoo ``ParallelEnv``; ``ConfigError`` saying
    what went wrong otherwise (the env's own error, where in its code)."""
    from pettingzoo import AECEnv, ParallelEnv

    from deszoo.errors import ConfigError

    try:
        env = env_fn()
    except Exception as exc:
        raise ConfigError(f"building {name} raised {type(exc).__name__}: {exc}"
                          f"{_where(exc)}") from None
    if isinstance(env, AECEnv):
        raise ConfigError(f"{name} is an AEC env ({type(env).__name__}); deszoo steps every "
                          "agent at once: wrap it with pettingzoo.utils.conversions."
                          "aec_to_parallel")
    if not isinstance(env, ParallelEnv) and not all(
            hasattr(env, a) for a in ("possible_agents", "reset", "step")):
        raise ConfigError(f"{name} built a {type(env).__name__}, not a PettingZoo "
                          "ParallelEnv")
    return env


def _check_determinism(env_fn: Callable[[], Any], seed: int, steps: int) -> str:
    state = (random.getstate(), np.random.get_state())
    try:
        random.seed(1)
        np.random.seed(1)
        first = _episode(env_fn(), seed, steps)
        random.seed(2)
        np.random.seed(2)
        again = _episode(env_fn(), seed, steps)
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])
    if not _same(first, again):
        from deszoo.core import SimPyParallelEnv

        if isinstance(env_fn, type) and issubclass(env_fn, SimPyParallelEnv) or isinstance(
                env_fn(), SimPyParallelEnv):
            fix = "self.rng, the episode's generator that reset(seed) builds, and pass it on"
        else:
            fix = "a generator seeded in reset (e.g. self.np_random = np.random.default_rng(seed))"
        raise CheckFailed(
            f"seed {seed} gave two different episodes when the global random state differed: "
            f"the env draws from random, numpy.random or an unseeded generator; draw from {fix}"
        )
    other = _episode(env_fn(), seed + 1, steps)
    if _same(first, other):
        raise CheckFailed(f"seeds {seed} and {seed + 1} gave the same episode: is the seed used?")
    return f"{len(first) - 1} steps replayed"


def _check_pickle(env_fn: Callable[[], Any], seed: int, steps: int) -> str:
    env = env_fn()
    try:
        clone = pickle.loads(pickle.dumps(env))
    except Exception as exc:
        import cloudpickle

        try:  # make_vec pickles the factory, not the env: that must work at least
            cloudpickle.loads(cloudpickle.dumps(env_fn))
        except Exception:
            raise CheckFailed(f"neither the env nor its factory pickles: {exc}") from None
        return f"the env does not pickle ({type(exc).__name__}); its factory does"
    if not _same(_episode(env, seed, steps), _episode(clone, seed, steps)):
        raise CheckFailed("the unpickled copy plays another episode for the same seed")
    return "the copy replays the episode"


def _check_vector(env_fn: Callable[[], Any], seed: int, steps: int) -> str:
    from deszoo.rollouts import assert_same_rollouts, rollout
    from deszoo.vector import make_vec

    runs = {}
    for backend, workers in (("roundrobin", None), ("shm", 2), ("supersuit", 2)):
        vec = make_vec(env_fn, 2, backend=backend, num_workers=workers, seed=seed)
        try:
            runs[backend] = rollout(vec, steps)
        finally:
            vec.close()
    ref = runs.pop("roundrobin")
    for backend, run in runs.items():
        try:
            assert_same_rollouts(ref, run, f"roundrobin vs {backend}")
        except AssertionError as exc:
            raise CheckFailed(str(exc)) from None
    return "roundrobin, shm and supersuit agree"


def check(env_fn: Callable[[], Any], seed: int = 0, steps: int = 200,
          episode_steps: int = EPISODE_STEPS,
          episode_seconds: float = EPISODE_SECONDS,
          on_verdict: Callable[[Verdict], None] | None = None) -> list[Verdict]:
    """Run every check on ``env_fn`` (a class or zero-argument factory); see the module
    docstring. Returns one :class:`Verdict` per check; later checks are skipped when the
    env cannot even be built, or when one of its steps does not return.

    ``episode_steps`` and ``episode_seconds`` bound the "episode ends" check;
    ``on_verdict`` is called with each verdict as soon as it is known."""
    import contextlib
    import io
    import warnings

    from pettingzoo.test import parallel_api_test, parallel_seed_test

    verdicts: list[Verdict] = []
    hung: list[str] = []

    def run(name: str, fn: Callable[[], str]) -> bool:
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                detail = fn()
            verdict = Verdict(name, True, detail or "")
        except CheckFailed as exc:
            verdict = Verdict(name, False, str(exc))
            if isinstance(exc, StepHangs):
                hung.append(name)
        except Exception as exc:
            verdict = Verdict(name, False, f"{type(exc).__name__}: {exc}{_where(exc)}")
        verdicts.append(verdict)
        if on_verdict is not None:
            on_verdict(verdict)
        return verdict.ok

    def builds() -> str:
        from deszoo.errors import ConfigError

        try:
            env = build(env_fn, getattr(env_fn, "__name__", "the env"))
        except ConfigError as exc:
            raise CheckFailed(str(exc)) from None
        try:
            with _watchdog(episode_seconds + 1.0):  # a reset that never returns
                env.reset(seed=seed)
        except _Alarm:
            raise StepHangs(_hang_message("reset", episode_seconds + 1.0, env)) from None
        return type(env).__name__

    if not run("builds", builds):
        return verdicts  # (a reset that never returns too: every other check would hang)
    if not run("episode ends", lambda: _check_ends(env_fn, seed, episode_steps,
                                                   episode_seconds)):
        if hung:
            return verdicts  # every other check would hang in the same step
    run("spaces", lambda: _check_spaces(env_fn()))
    run("pettingzoo api", lambda: parallel_api_test(env_fn(), num_cycles=steps) or "passed")
    run("pettingzoo seed", lambda: parallel_seed_test(env_fn, num_cycles=steps) or "passed")
    run("observations", lambda: _check_observations(env_fn(), seed, steps))
    run("determinism", lambda: _check_determinism(env_fn, seed, steps))
    run("pickle", lambda: _check_pickle(env_fn, seed, steps))
    run("vector", lambda: _check_vector(functools.partial(_call, env_fn), seed,
                                        min(steps, 60)))
    return verdicts


def _call(fn: Callable[[], Any]) -> Any:
    return fn()


NAME_WIDTH = len("pettingzoo seed")
"""The longest check's name: verdicts printed one at a time line up."""


def report(verdicts: list[Verdict]) -> str:
    """The verdicts as aligned text lines."""
    return "\n".join(
        f"{'PASS' if v.ok else 'FAIL'}  {v.name:<{NAME_WIDTH}}  {v.detail}" for v in verdicts
    )
