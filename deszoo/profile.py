"""``deszoo profile``: where an env's step goes, and what would pay most to change.

One run on a registered scenario or a user's env (``MODULE:ATTR``):

1. **Record.** ``steps`` env steps of the random legal policy (a uniform legal action per
   deciding agent), autoresets included (a reset counts as a step, as in ``deszoo bench``),
   with the SimPy events they process.
2. **Time** the replay of those actions through the array step (``step_arrays``), best of
   ``repeats``, without a profiler: the *measured step*, in CPU time (wall time shown
   too). Then through PettingZoo's dict ``step`` (the action dicts built before the clock
   starts): the dict API's extra.
3. **Profile** the same replay under :mod:`cProfile`, alternating with the timed replays
   (the best of each is kept, so that a change in the machine's load hits both alike).
   Each function's own time goes to a *part* by the file it lives in: SimPy (the ``simpy``
   package), the bridge (``deszoo.core``, and the adapter for a plain ``ParallelEnv``), the
   model (the env's own modules: ``deszoo/envs/...`` or the user's files), the replay loop.
   Code of numpy, the standard library and builtins counts for whoever called it (split by
   the time it spent for each caller). cProfile slows a step down 2-3x, more for models of
   many small calls, so the parts are its own times *scaled* to the measured step (they then
   sum to it); the report shows the profiler's totals next to them: the profiled step, and
   how much of the profiled run's wall time the own times cover (which must be within
   :data:`TOLERANCE` of all of it, or some of the step is not in any part). Of ``repeats``
   profiled runs the one least disturbed by other processes (least wall time) is kept. A
   statistical sampler (``SIGPROF`` every millisecond of CPU time, no cProfile) replays the
   steps again for a second opinion on the shares; it has a bias of its own (CPython takes
   a signal only at a function's entry or a loop's jump back), so the report gives its
   largest difference from the profile's shares as how far to trust them.
4. **Vector transport** at ``num_envs`` envs: the same seeded work sampled serially and on
   each of ``modes`` (``deszoo bench``'s sessions, every mode following the same
   trajectories); what a mode adds per env step over the serial loop.
5. **Advice**: the two or three changes that would pay most, from the figures above.

Example::

    from deszoo.profile import profile, format_report
    print(format_report(profile("jobshop_v0", steps=1000)))
"""

from __future__ import annotations

import cProfile
import dis
import os
import pstats
import site
import sys
import sysconfig
import textwrap
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from deszoo._links import doc

__all__ = [
    "DEFAULT_MODES",
    "TOLERANCE",
    "FunctionCost",
    "Part",
    "Report",
    "TransportCost",
    "format_report",
    "profile",
]

TOLERANCE = 0.10
"""The profile's own times must add up to the profiled run's wall time within this share of
it (the report says whether they did). The sampler's shares are a second opinion: the
report gives their largest difference from the profile's."""

DEFAULT_MODES = ("roundrobin", "shm")
"""Vector modes timed by default (``deszoo bench``'s modes; ``serial`` is the reference)."""

SPEED_DOCS = doc("custom.md#speed")
"""Where the advice points (a URL: a wheel has no docs/)."""

WIDTH = 96
"""Width of the report's wrapped lines."""

_HERE = os.path.dirname(os.path.abspath(__file__))
_SIMPY = os.path.dirname(os.path.abspath(simpy.__file__)) + os.sep
_CORE = os.path.join(_HERE, "core") + os.sep
_ENVS = os.path.join(_HERE, "envs") + os.sep
_DESZOO = _HERE + os.sep
_THIS = os.path.abspath(__file__)


def _library_roots() -> tuple[str, ...]:
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        roots.update(site.getsitepackages())
    except AttributeError:  # some virtualenvs
        pass
    roots.add(os.path.dirname(os.path.abspath(np.__file__)))
    return tuple(os.path.abspath(r) + os.sep for r in roots if r)


_LIBRARY = _library_roots()

PARTS = ("model", "SimPy", "bridge", "replay loop")
"""The parts of a step, in the report's order."""


# ---- results -------------------------------------------------------------------------------
@dataclass
class Part:
    """One part of the step: its time per step scaled to the measured step (``us``), as
    profiled (``raw_us``), of it in numpy, builtins and the standard library it called
    (``library_us``, scaled), its function calls per step, and its share of the sampler's
    samples (``sampled``, ``None`` without samples)."""

    name: str
    us: float
    raw_us: float
    library_us: float
    calls: float
    sampled: float | None = None


@dataclass
class FunctionCost:
    """One function of the model: own time per step with the library code it called
    (scaled as the parts are), calls per step, where it is."""

    name: str
    where: str
    us: float
    calls: float


@dataclass
class TransportCost:
    """One vector mode at ``num_envs`` envs: time per env step (CPU for an in-process mode,
    wall for a mode with workers), serial's, and what the mode adds (``added_us``: for an
    in-process mode its CPU per env step minus serial's; for a mode with workers its wall
    per env step times the workers minus serial's, i.e.
    what each worker spends per env step beyond the env's own step, waiting included)."""

    mode: str
    num_envs: int
    num_workers: int
    wall_us: float
    serial_us: float
    added_us: float
    error: str | None = None

    @property
    def speedup(self) -> float:
        return self.serial_us / self.wall_us if self.wall_us else float("nan")


@dataclass
class Report:
    """Everything :func:`profile` measured (see the module docstring)."""

    label: str
    preset: str | None
    steps: int
    resets: int
    agents: int
    events_per_step: float | None
    step_us: float  # measured, no profiler (CPU time, best of the repeats)
    step_wall_us: float
    profiled_us: float  # the profiler's total per step (sum of own times, wall clock)
    profiled_wall_us: float  # the profiled run's wall time per step
    profiled_cpu_us: float  # ... and its CPU time
    parts: list[Part]
    functions: list[FunctionCost]
    dict_us: float | None
    samples: int = 0
    transport: list[TransportCost] = field(default_factory=list)
    free_cores: float | None = None
    advice: list[str] = field(default_factory=list)

    @property
    def parts_us(self) -> float:
        return sum(p.us for p in self.parts)

    @property
    def coverage(self) -> float:
        """The profiler's own times over the profiled run's wall time."""
        return self.profiled_us / self.profiled_wall_us if self.profiled_wall_us else 0.0

    @property
    def sample_gap(self) -> float | None:
        """The largest difference between a part's profiled and sampled share."""
        if not self.samples:
            return None
        return max(abs(p.us / self.step_us - (p.sampled or 0.0)) for p in self.parts)

    @property
    def adds_up(self) -> bool:
        return abs(self.coverage - 1) <= TOLERANCE

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)


def _own_total(stats: dict) -> float:
    return sum(v[2] for k, v in stats.items() if "_lsprof" not in k[2])


# ---- recording and replaying ---------------------------------------------------------------
def _plan(env: Any, seed: int, steps: int) -> tuple[list, int]:
    """``steps`` steps of the random legal policy: per step the padded actions, or ``None``
    for an autoreset; and the SimPy events they processed."""
    from gymnasium import spaces

    rng = np.random.default_rng(seed)
    env.reset_arrays(seed)
    plan: list = []
    events = 0
    discrete = env.rows.type is spaces.Discrete
    for _ in range(steps):
        if env.episode_over:
            events += env.num_events
            env.reset_arrays(None)
            plan.append(None)
            continue
        mask = env.mask_buf
        acts = env.rows.zero_actions()
        if discrete:
            acts[:] = (rng.random(mask.shape) * mask).argmax(axis=1)
        else:
            for i in range(len(acts)):
                acts[i] = env.rows.fallback(i, mask[i], rng)
        plan.append(acts.copy())
        env.step_arrays(acts)
    events += env.num_events
    return plan, events


def _replay(env: Any, plan: list) -> None:
    """The replay loop (what is timed and profiled): one array step per item."""
    reset, step = env.reset_arrays, env.step_arrays
    for acts in plan:
        if acts is None:
            reset(None)
        else:
            step(acts)


def _replay_dict(env: Any, plan: list) -> None:
    reset, step = env.reset, env.step
    for actions in plan:
        if actions is None:
            reset()
        else:
            step(actions)


def _dict_plan(env: Any, plan: list) -> list:
    rows = env.rows
    out = []
    agents: list[str] = []
    for acts in plan:
        if acts is None:
            out.append(None)
            agents = []
            continue
        if not agents:
            agents = list(env.possible_agents)
        given = {}
        for i, a in enumerate(env.possible_agents):
            value = rows.unpad(i, acts[i])
            given[a] = int(value) if getattr(value, "ndim", 0) == 0 else value
        out.append(given)
    return out


def _timed(fn, env: Any, seed: int, plan: list, repeats: int) -> tuple[float, float]:
    """Best wall and CPU seconds of ``fn(env, plan)`` after ``env.reset_arrays(seed)``."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        env.reset_arrays(seed)
        c0, t0 = time.process_time(), time.perf_counter()
        fn(env, plan)
        t1, c1 = time.perf_counter(), time.process_time()
        wall, cpu = min(wall, t1 - t0), min(cpu, c1 - c0)
    return wall, cpu


# ---- attribution ---------------------------------------------------------------------------
def _model_files(env: Any) -> tuple[set[str], set[str]]:
    """Files and folders of the env's own code: the modules of its classes (a plain env
    behind the adapter: of the wrapped env's), less deszoo's core and third-party bases."""
    target = getattr(env, "env", env) if type(env).__name__ == "ParallelEnvArrays" else env
    files, folders = set(), set()
    for cls in type(target).__mro__:
        module = sys.modules.get(cls.__module__)
        path = getattr(module, "__file__", None)
        if not path:
            continue
        path = os.path.abspath(path)
        if path.startswith((_CORE, _SIMPY)) or (path.startswith(_LIBRARY)
                                                 and not path.startswith(_DESZOO)):
            continue
        files.add(path)
        folder = os.path.dirname(path) + os.sep
        if folder.startswith(_ENVS) and folder != _ENVS:
            # a scenario's package: deszoo/envs/<name>/ (its version modules re-export)
            folders.add(os.path.join(_ENVS, folder[len(_ENVS):].split(os.sep)[0]) + os.sep)
        elif not folder.startswith(_DESZOO) and folder not in _LIBRARY:
            folders.add(folder)
    return files, folders


def _kind(filename: str, model: tuple[set[str], set[str]]) -> str:
    """The part of a function by its file, or ``"library"`` (numpy, the standard library,
    builtins, other packages): counted for its callers."""
    if filename == "~" or filename.startswith("<"):
        return "library"
    path = os.path.abspath(filename)
    files, folders = model
    if path == _THIS:
        return "replay loop"
    if path in files or path.startswith(tuple(folders)) or path.startswith(_ENVS):
        return "model"
    if path.startswith(_SIMPY):
        return "SimPy"
    if path.startswith(_DESZOO):
        return "bridge"
    if path.startswith(_LIBRARY):
        return "library"
    return "model"  # a user's code outside any library


def _attribute(stats: dict, model: tuple[set[str], set[str]]) -> dict:
    """Per function of a part (a *home* function): its own time plus the library time it
    caused, and the Python and C calls that make up the profiler's cost of both.

    A library function's time and calls are split over its callers by the time it spent
    for each (by calls where that is zero), through chains of library callers.
    """
    kinds = {k: _kind(k[0], model) for k in stats if "_lsprof" not in k[2]}
    home = {k for k, kind in kinds.items() if kind != "library"}
    dist: dict[tuple, dict[tuple, float]] = {k: {k: 1.0} for k in home}
    pending = [k for k in kinds if k not in home]
    for _ in range(50):  # chains of library calls resolve in a few passes
        changed = False
        for key in pending:
            callers = stats[key][4]
            weights: dict[tuple, float] = {}
            total = sum(v[2] for c, v in callers.items() if c in dist)
            for caller, v in callers.items():
                if caller not in dist:
                    continue
                w = v[2] / total if total > 0 else v[1]
                for h, share in dist[caller].items():
                    weights[h] = weights.get(h, 0.0) + w * share
            norm = sum(weights.values())
            if norm > 0:
                new = {h: w / norm for h, w in weights.items()}
                if new != dist.get(key):
                    dist[key] = new
                    changed = True
        if not changed:
            break
    out = {h: {"own": stats[h][2], "library": 0.0, "py": float(stats[h][1]), "c": 0.0}
           for h in home}
    for key in pending:
        if key not in dist:
            continue
        _, nc, tt, _, _ = stats[key]
        is_c = key[0] == "~"
        for h, share in dist[key].items():
            acc = out[h]
            acc["library"] += tt * share
            acc["c" if is_c else "py"] += nc * share
    for h, acc in out.items():
        acc["kind"] = kinds[h]
    return out


def _label(key: tuple) -> tuple[str, str]:
    filename, line, name = key
    return name, f"{os.path.basename(filename)}:{line}"


# ---- the run --------------------------------------------------------------------------------
def _sample(env: Any, seed: int, plan: list, model, seconds: float) -> dict[str, float]:
    """Samples per part: replays of ``plan`` under a ``SIGPROF`` sampler for ``seconds`` of
    CPU time. A sample goes to the innermost frame that is not library code (as cProfile's
    own times do with the library code's callers). Empty where there is no ``SIGPROF``
    (not POSIX, or not the main thread)."""
    import signal
    import threading

    counts = dict.fromkeys(PARTS, 0.0)
    if not hasattr(signal, "setitimer") or (threading.current_thread()
                                            is not threading.main_thread()):
        return {}
    kinds: dict[str, str] = {}

    resume = dis.opmap.get("RESUME")

    def home(frame) -> str | None:
        while frame is not None:
            filename = frame.f_code.co_filename
            kind = kinds.get(filename)
            if kind is None:
                kind = kinds[filename] = _kind(filename, model)
            if kind != "library":
                return kind
            frame = frame.f_back
        return None

    def tick(signum, frame):
        # CPython runs a signal handler where it checks for one: at a function's entry
        # (RESUME) or a loop's jump back. A sample taken at an entry is as likely time of
        # the code that ran up to the call: it counts half for the caller.
        code = frame.f_code
        here = home(frame)
        if here is None:
            return
        if resume is not None and frame.f_back is not None and \
                0 <= frame.f_lasti < len(code.co_code) and code.co_code[frame.f_lasti] == resume:
            caller = home(frame.f_back) or here
            counts[here] += 0.5
            counts[caller] += 0.5
        else:
            counts[here] += 1

    old = signal.signal(signal.SIGPROF, tick)
    signal.setitimer(signal.ITIMER_PROF, 0.001, 0.001)
    try:
        end = time.process_time() + seconds
        while time.process_time() < end:
            env.reset_arrays(seed)
            _replay(env, plan)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)
    return counts


def profile(
    name: str,
    preset: str | None = None,
    steps: int = 2000,
    num_envs: int = 8,
    modes: tuple[str, ...] | list[str] = DEFAULT_MODES,
    num_workers: int | None = None,
    seed: int = 0,
    repeats: int = 3,
    sample_seconds: float = 2.0,
    progress=None,
) -> Report:
    """Profile ``name`` (a registered scenario or ``MODULE:ATTR``); see the module docstring.

    Args:
        name: the env, as every command takes it.
        preset: the preset (registered scenarios: default ``"default"``).
        steps: env steps recorded, replayed, profiled (autoresets included).
        num_envs: envs of the vector transport's rows.
        modes: vector modes to time against serial (empty: none).
        num_workers: workers of the multiprocess modes (default: the usable cores, at most
            one per env).
        seed: the env's seed (and the random policy's).
        repeats: rounds of one timed replay and one profiled replay (the best of each is
            kept).
        sample_seconds: CPU seconds of the sampler's check (0: no check).
        progress: called with a short line before each phase (or ``None``).
    """
    from deszoo.bench.modes import build_env
    from deszoo.bench.work import Work

    say = progress or (lambda text: None)
    work = Work(name, preset or "default", steps, seed)
    env = build_env(work)
    try:
        say("recording the steps")
        plan, events = _plan(env, seed, steps)
        resets = sum(1 for a in plan if a is None)
        _timed(_replay, env, seed, plan, 1)  # warm-up
        wall = cpu = profiled_wall = profiled_cpu = float("inf")
        best = None
        for k in range(repeats):
            say(f"timing and profiling the array step ({k + 1}/{repeats})")
            w, c = _timed(_replay, env, seed, plan, 1)
            wall, cpu = min(wall, w), min(cpu, c)
            env.reset_arrays(seed)
            # cProfile's wall clock: a CPU-time clock is a system call, whose cost would
            # inflate the parts of many small calls (SimPy's). Time other processes take
            # lands in whichever function was running, so the least disturbed run is kept.
            prof = cProfile.Profile()
            c0, t0 = time.process_time(), time.perf_counter()
            prof.runcall(_replay, env, plan)
            pw, pc = time.perf_counter() - t0, time.process_time() - c0
            if best is None or pw < profiled_wall:
                profiled_wall, best = pw, pstats.Stats(prof).stats
            profiled_cpu = min(profiled_cpu, pc)
        stats = best
        total = _own_total(stats)
        model = _model_files(env)
        homes = _attribute(stats, model)
        dict_us = None
        if hasattr(env, "_finish") and callable(getattr(env, "step", None)):  # a deszoo env
            say("timing the dict step")
            _, dcpu = _timed(_replay_dict, env, seed, _dict_plan(env, plan), repeats)
            dict_us = dcpu / steps * 1e6
        counts: dict[str, float] = {}
        if sample_seconds > 0:
            say("sampling the step (the check)")
            counts = _sample(env, seed, plan, model, sample_seconds)
        agents = len(env.possible_agents)
        simpy_events = events if type(env).__name__ != "ParallelEnvArrays" else None
    finally:
        env.close()

    per_step = 1e6 / steps
    scale = cpu / total if total else 0.0  # profiled own times -> the measured step
    samples = round(sum(counts.values()))
    parts = []
    for part in PARTS:
        mine = [a for a in homes.values() if a["kind"] == part]
        raw = sum(a["own"] + a["library"] for a in mine)
        lib = sum(a["library"] for a in mine)
        calls = sum(a["py"] + a["c"] for a in mine)
        parts.append(Part(part, raw * scale * per_step, raw * per_step, lib * scale * per_step,
                          calls / steps, counts.get(part, 0) / samples if samples else None))
    functions = []
    for key, a in homes.items():
        if a["kind"] == "model":
            fname, where = _label(key)
            functions.append(FunctionCost(fname, where, (a["own"] + a["library"]) * scale
                                          * per_step, stats[key][1] / steps))
    functions.sort(key=lambda f: -f.us)
    report = Report(
        label=name, preset=preset, steps=steps, resets=resets, agents=agents,
        events_per_step=None if simpy_events is None else simpy_events / steps,
        step_us=cpu * per_step, step_wall_us=wall * per_step, profiled_us=total * per_step,
        profiled_wall_us=profiled_wall * per_step, profiled_cpu_us=profiled_cpu * per_step,
        parts=parts, functions=functions,
        dict_us=dict_us, samples=samples,
    )
    if modes:
        say(f"timing the vector transport at {num_envs} envs")
        report.transport, report.free_cores = _transport(name, preset, num_envs, modes,
                                                         num_workers, seed, steps)
    report.advice = advise(report)
    return report


def _transport(name: str, preset: str | None, num_envs: int, modes, num_workers: int | None,
               seed: int, steps: int) -> tuple[list[TransportCost], float | None]:
    """Serial and each mode on the same seeded work (``deszoo bench``'s sessions). An
    in-process mode is compared with serial in CPU time (the load of other processes does
    not count), a mode with workers in wall time (its workers' CPU is not the parent's)."""
    from deszoo.bench.machine import free_cores, usable_cores
    from deszoo.bench.modes import is_in_process, open_session
    from deszoo.bench.work import Work

    work = Work(name, preset or "default", max(steps, num_envs * 64), seed)

    def best(mode: str, workers: int | None) -> tuple[float, float, int]:
        session = open_session(work, mode, num_envs, workers)
        try:
            session.reset()
            session.run(max(1, session.steps_per_env // 10))  # warm-up
            session.reset()
            walls, cpus = [], []
            for _ in range(2):
                stats = session.run()
                walls.append((stats.wall_s - stats.harness_s) / stats.env_steps)
                cpus.append((stats.cpu_s - stats.harness_s) / stats.env_steps)
                session.reset()
            return min(walls) * 1e6, min(cpus) * 1e6, session.num_workers
        finally:
            session.close()

    free = free_cores()
    serial_wall, serial_cpu, _ = best("serial", None)
    out = []
    for mode in modes:
        inside = is_in_process(mode)
        workers = None if inside else (num_workers or max(1, min(usable_cores(), num_envs)))
        serial = serial_cpu if inside else serial_wall
        try:
            wall, cpu, w = best(mode, workers)
        except Exception as exc:  # one mode failing must not lose the profile
            out.append(TransportCost(mode, num_envs, workers or 0, float("nan"), serial,
                                     float("nan"), f"{type(exc).__name__}: {exc}"))
            continue
        if inside:
            out.append(TransportCost(mode, num_envs, 0, cpu, serial, cpu - serial))
        else:
            out.append(TransportCost(mode, num_envs, w, wall, serial, wall * max(w, 1) - serial))
    return out, free


# ---- advice ---------------------------------------------------------------------------------
def _share(part: Part, step: float) -> tuple[float, str]:
    """A part's share of the step for the advice: the profile's, or, where the sampler
    disagrees by more than :data:`TOLERANCE`, the middle of the two (and both, as a range)."""
    share = part.us / step if step else 0.0
    if part.sampled is None or abs(part.sampled - share) <= TOLERANCE:
        return share, f"{share:.0%}"
    lo, hi = sorted((share, part.sampled))
    return (lo + hi) / 2, f"{lo:.0%}-{hi:.0%} (profile and sampler)"


def advise(report: Report) -> list[str]:
    """The two or three changes that would pay most, largest share first."""
    step = report.step_us
    found: list[tuple[float, str]] = []
    model = report.part("model")
    if report.functions:
        top = report.functions[0]
        share = top.us / step
        if top.name == "_observe_all" and share >= 0.15:
            found.append((share, (
                f"{share:.0%} of the step is `_observe_all` ({top.us:.1f} us, {top.where}): "
                "write the observation rows with fewer Python and numpy calls (one array "
                "for what every agent shares, only the rows that changed); see "
                f"{SPEED_DOCS}")))
        elif share >= 0.15:
            found.append((share, (
                f"{share:.0%} of the step is the model's `{top.name}` ({top.us:.1f} us, "
                f"{top.where}, {top.calls:.2g} call{'' if top.calls == 1 else 's'} per "
                "step): the first place to make "
                f"faster; see {SPEED_DOCS}")))
        for f in report.functions[1:3]:
            share = f.us / step
            if share >= 0.2:
                found.append((share, f"{share:.0%} of the step is the model's `{f.name}` "
                                     f"({f.where}); see {SPEED_DOCS}"))
    sim = report.part("SimPy")
    share, said = _share(sim, step)
    if share >= 0.2 and report.events_per_step:
        per = sim.us / report.events_per_step
        found.append((share, (
            f"{said} of the step is SimPy's event loop ({report.events_per_step:.1f} "
            f"events per step, {per:.2f} us each): fewer events pay, e.g. events that touch "
            "only their own corner of the model served together, a plain FIFO instead of "
            f"a simpy.Resource; see {SPEED_DOCS}")))
    bridge = report.part("bridge")
    share, said = _share(bridge, step)
    if share >= 0.4 and report.events_per_step is None:  # a plain ParallelEnv
        found.append((share, (
            f"{said} of the step is deszoo's adapter ({bridge.us:.1f} us), which copies "
            "the dict API's results into arrays: the model does little per step; a "
            "SimPyParallelEnv fills the arrays itself (see docs/custom.md)")))
    elif share >= 0.4:
        found.append((share, (
            f"{said} of the step is the bridge ({bridge.us:.1f} us): the model does "
            "little per step, so the step's fixed cost dominates; more work per step pays "
            "(agents of a round deciding together: every(..., together=True))")))
    if report.dict_us is not None and step > 0:
        extra = report.dict_us - step
        if extra / step >= 0.25:
            found.append((extra / step * 0.9, (
                f"the dict API adds {extra:.1f} us ({extra / step:.0%}) to every step: train "
                "through a vector env (deszoo.vector.make_vec), which steps the arrays")))
    for t in report.transport:
        if t.error is not None or not t.serial_us:
            continue
        if t.num_workers == 0 and t.added_us / t.serial_us >= 0.25:
            found.append((t.added_us / t.serial_us * 0.8, (
                f"{t.mode} adds {t.added_us:.1f} us per env step at {t.num_envs} envs, "
                f"{t.added_us / t.serial_us:.0%} of the env's step: the step is cheap "
                "against the vector step's fixed cost; more envs per vector env pay "
                f"(deszoo bench --scenarios {report.label} --num-envs "
                f"{t.num_envs * 4})")))
        elif t.num_workers > 0 and t.speedup < 1:
            free = ("" if report.free_cores is None
                    else f" ({report.free_cores:.1f} cores were free)")
            if report.free_cores is not None and report.free_cores < t.num_workers - 0.25:
                found.append((0.01, (  # a caveat, not a change: last
                    f"{t.mode} with {t.num_workers} workers ran at {t.speedup:.2f}x serial, "
                    f"but only {report.free_cores:.1f} cores were free: time the vector "
                    "transport on an idle machine before deciding")))
                continue
            found.append((0.5, (
                f"{t.mode} with {t.num_workers} workers ran at {t.speedup:.2f}x serial"
                f"{free}: with more envs per worker the transport's cost is shared "
                f"(deszoo bench --scenarios {report.label} --num-envs "
                f"{t.num_envs * 4},{t.num_envs * 8})")))
    if not found and model.us:
        found.append((0.0, "no single part dominates: the model's own code is "
                     f"{model.us / step:.0%} of the step; see {SPEED_DOCS}"))
    found.sort(key=lambda x: -x[0])
    return [text for _, text in found[:3]]


# ---- the report ----------------------------------------------------------------------------
def _f(x: float) -> str:
    return f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}" if abs(x) < 1000 else f"{x:,.0f}"


def format_report(r: Report) -> str:
    """The report as plain text lines (under 100 columns)."""
    step = r.step_us
    preset = f", preset {r.preset}" if r.preset else ""
    events = ("n/a (not a deszoo env)" if r.events_per_step is None
              else f"{r.events_per_step:.1f}")
    sampled = "sampled" if r.samples else ""
    lines = [
        f"profile of {r.label}{preset}: {r.steps} env steps of the random legal policy "
        f"({r.resets} autoresets), {r.agents} agents",
        f"measured step (array API, no profiler, best CPU time): {_f(step)} us "
        f"(wall {_f(r.step_wall_us)} us); SimPy events per step: {events}",
        "",
        f"{'part of the array step':<42}{'us/step':>9}{'share':>7}{'of it numpy+':>14}"
        f"{'profiled':>10}{sampled:>9}",
        f"{'':<42}{'':>9}{'':>7}{'builtins us':>14}{'us':>10}{'share' if sampled else '':>9}",
    ]
    names = {
        "model": "model (its own code)",
        "SimPy": "SimPy (the simpy package)",
        "bridge": "bridge (deszoo.core)",
        "replay loop": "replay loop (the profile's own loop)",
    }
    for p in r.parts:
        if p.name == "SimPy" and r.events_per_step is None and not p.raw_us:
            continue  # not a SimPy model (or not one deszoo can see into)
        label = names[p.name]
        if p.name == "SimPy" and r.events_per_step:
            label = (f"SimPy ({r.events_per_step:.1f} events, "
                     f"{_f(p.us / r.events_per_step)} us each)")
        check = "" if p.sampled is None else f"{p.sampled:.0%}"
        lines.append(f"{label:<42}{_f(p.us):>9}{p.us / step:>7.0%}{_f(p.library_us):>14}"
                     f"{_f(p.raw_us):>10}{check:>9}")
    lines.append(f"{'sum of the parts = the measured step':<42}{_f(r.parts_us):>9}"
                 f"{r.parts_us / step:>7.0%}{'':>14}{_f(r.profiled_us):>10}")
    gap = r.sample_gap
    verdict = "within" if r.adds_up else "NOT within"
    simpy = r.part("SimPy")
    note = (
        f"The parts are cProfile's own times scaled to the measured step, so they sum to it. "
        f"Under cProfile the step took {_f(r.profiled_wall_us)} us of wall time "
        f"({r.profiled_wall_us / r.step_wall_us:.1f}x the wall time without it) and "
        f"{_f(r.profiled_cpu_us)} us of CPU; its own times (the 'profiled' column) cover "
        f"{r.coverage:.0%} of that wall time, {verdict} the tolerance of {TOLERANCE:.0%}."
        + ("" if gap is None else
           f" A sampler ({r.samples} samples of CPU time, without cProfile; biased towards "
           "function entries) puts each part within "
           f"{gap * 100:.0f} points of the profile's share.")
        + " SimPy's own Python alone (the numpy and builtins it calls counted apart): "
        f"{(simpy.us - simpy.library_us) / step:.0%} of the step."
    )
    if gap is not None and gap > TOLERANCE:
        note += (" Where they differ by more than that, read a part's share as the range "
                 "between the two: cProfile's cost per call inflates parts made of many small "
                 "calls (SimPy's), the sampler leans towards the functions entered next.")
    if not r.adds_up:
        note += " The machine's load likely changed during the run: rerun, or with more --steps."
    lines += ["", *textwrap.wrap(note, WIDTH)]
    if r.functions:
        lines += ["", "the model's own code by function (own time and the numpy/builtins it "
                  "calls, scaled as above):", f"{'function':<34}{'where':<28}{'calls/step':>11}"
                  f"{'us/step':>9}{'share':>8}"]
        for f in r.functions[:8]:
            lines.append(f"{f.name[:33]:<34}{f.where[:27]:<28}{f.calls:>11.2f}{_f(f.us):>9}"
                         f"{f.us / step:>8.0%}")
    if r.dict_us is not None:
        extra = r.dict_us - step
        lines += ["", f"dict API (PettingZoo's step): {_f(r.dict_us)} us per step, "
                  f"{_f(extra)} us ({extra / step:+.0%}) over the array step"]
    if r.transport:
        free = "" if r.free_cores is None else f", {r.free_cores:.1f} cores free before"
        lines += ["", f"vector transport at {r.transport[0].num_envs} envs (the same seeded "
                  f"work as serial{free}):",
                  f"{'mode':<12}{'workers':>8}{'clock':>6}{'us/env step':>13}{'serial':>8}"
                  f"{'vs serial':>11}{'adds':>8}"]
        for t in r.transport:
            if t.error:
                lines.append(f"{t.mode:<12}failed: {t.error}")
                continue
            clock = "wall" if t.num_workers else "CPU"
            lines.append(f"{t.mode:<12}{t.num_workers or '-':>8}{clock:>6}{_f(t.wall_us):>13}"
                         f"{_f(t.serial_us):>8}{t.speedup:>10.2f}x{_f(t.added_us):>8}")
        lines += textwrap.wrap(
            "adds: us per env step a mode adds over serial; in-process, its time minus "
            "serial's; with workers, its time x workers minus serial's (what each worker "
            "spends per env step beyond the step itself, waiting included: only meaningful "
            "with free cores).", WIDTH)
    if r.advice:
        lines += ["", "what would pay most:"]
        for k, text in enumerate(r.advice, 1):
            lines += textwrap.wrap(text, WIDTH, initial_indent=f"  {k}. ",
                                   subsequent_indent="     ")
    return "\n".join(lines)
