"""The run matrix: scenarios x presets x modes x ``num_envs`` x ``num_workers``.

:func:`run_matrix` runs every configuration of a :class:`Matrix` and returns a result in the
format of :mod:`deszoo.bench.schema`. Each row: build the envs or start the workers
(untimed, reported as ``setup_s``), one untimed warm-up of ``warmup_fraction`` of the steps,
then ``repeats`` timed runs of the row's whole work, each from a fresh ``reset(seed)``.
"""

from __future__ import annotations

import datetime as _dt
import gc
import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from deszoo.bench.machine import (
    children_peak_rss_mb,
    code_record,
    free_cores,
    load_average,
    machine_record,
    reset_peak_rss,
    self_peak_rss_mb,
    usable_cores,
    worker_counts,
    worker_pids,
)
from deszoo.bench.modes import (
    RunStats,
    SerialSession,
    available_modes,
    is_in_process,
    missing_package,
)
from deszoo.bench.modes import open_session as _open_session
from deszoo.bench.schema import SCHEMA, check, results_work_hash
from deszoo.bench.work import STANDARD_ENV_STEPS, STANDARD_SEED, Work, steps_per_env
from deszoo.errors import ConfigError
from deszoo.registry import env_module, list_envs

__all__ = [
    "Config",
    "Matrix",
    "QUICK_WORKS",
    "available_scenarios",
    "quick_matrix",
    "run_matrix",
    "standard_matrix",
]

log = logging.getLogger(__name__)

Progress = Callable[[float, str], None]
"""``progress(advance, description)``: called as units of work finish (see
:func:`total_units`)."""

SETUP_UNITS = 0.1
"""Progress units for building a row's envs or starting its workers, in timed repeats: on 2
cores it takes from nothing (serial) to about a third of a repeat (starting workers for a
heavy scenario); about 0.1 on average over the quick suite."""


@dataclass(frozen=True)
class Config:
    """One row of the matrix: a work and how to sample it."""

    work: Work
    mode: str
    num_envs: int
    num_workers: int  # 0 for in-process modes

    @property
    def label(self) -> str:
        workers = "" if is_in_process(self.mode) else f" w{self.num_workers}"
        return f"{self.work.label} {self.mode} n{self.num_envs}{workers}"


@dataclass
class Matrix:
    """What to run. Modes default to every available one (:func:`available_modes`).

    A scenario entry ``"name/preset"`` runs that preset only; a plain ``"name"`` runs every
    preset of ``presets``. ``works``, when given, replaces scenarios x presets (each work
    keeps its own ``env_steps``).
    """

    scenarios: list[str]
    presets: list[str] = field(default_factory=lambda: ["default"])
    modes: list[str] | None = None
    num_envs: list[int] = field(default_factory=lambda: [8])
    num_workers: list[int] = field(default_factory=lambda: [usable_cores()])
    env_steps: int = STANDARD_ENV_STEPS
    seed: int = STANDARD_SEED
    repeats: int = 3
    warmup_fraction: float = 0.1
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    suite: str = "custom"
    census: bool = True  # run serial untimed where a row has no serial reference
    work_list: list[Work] | None = None
    interleave: bool = True  # alternate repeats between the rows of a (work, num_envs)

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ConfigError(f"repeats={self.repeats} must be at least 1")
        if not 0 <= self.warmup_fraction <= 1:
            raise ConfigError(f"warmup_fraction={self.warmup_fraction} must be in [0, 1]")
        for n in [*self.num_envs, *self.num_workers]:
            if not isinstance(n, int) or n < 1:
                raise ConfigError(f"num_envs and num_workers must be positive, got {n!r}")

    def resolved_modes(self) -> list[str]:
        modes = available_modes() if self.modes is None else list(self.modes)
        known = available_modes()
        for m in modes:
            if m in known:
                continue
            missing = missing_package(m)
            if missing:
                raise ConfigError(f"mode {m!r} needs the package {missing!r}, which is not "
                                  f"installed; available modes: {known}")
        unknown = [m for m in modes if m not in known]
        if unknown:
            raise ConfigError(f"unknown mode(s) {unknown}; available: {known}")
        return modes

    def works(self) -> list[Work]:
        if self.work_list is not None:
            return list(self.work_list)
        out = []
        for entry in self.scenarios:
            name, _, preset = entry.partition("/")
            for p in [preset] if preset else self.presets:
                out.append(Work(name, p, self.env_steps, self.seed, dict(self.env_kwargs)))
        return out

    def configs(self) -> list[Config]:
        """Every row, serial first within each (work, ``num_envs``)."""
        out = []
        modes = self.resolved_modes()
        for work in self.works():
            for n in self.num_envs:
                for mode in modes:
                    if is_in_process(mode):
                        out.append(Config(work, mode, n, 0))
                    else:
                        out.extend(Config(work, mode, n, w) for w in self.num_workers)
        return out


def available_scenarios() -> list[str]:
    """Registered scenarios whose module imports (others are skipped with a warning)."""
    names = []
    for name in list_envs():
        try:
            env_module(name)
        except Exception as exc:  # a scenario being written elsewhere may not import yet
            log.warning("skipping scenario %s: %s: %s", name, type(exc).__name__, exc)
            continue
        names.append(name)
    return names


QUICK_WORKS = (("jobshop_v0", "default", 8192), ("traffic_v1", "large", 512))
"""The quick matrix's works: a light scenario (about 60 us and 5 SimPy events per step) and
a heavy one (about 1.5 ms and 500 events per step), each about 0.5 to 1 s of serial work."""


def quick_matrix(modes: list[str] | None = None) -> Matrix:
    """``deszoo bench``'s default, every kind of mode: under a minute on 2 cores, even busy
    ones (47 to 50 s at load average 5.5 to 7.5).

    The :data:`QUICK_WORKS` that are registered (or else the first scenario), 8 envs, 1 and
    all usable cores as workers, every available mode except ``ray`` (whose start-up alone
    takes seconds).
    """
    if modes is None:
        modes = [m for m in available_modes() if m != "ray"]
    cores = usable_cores()
    have = available_scenarios()
    works = [Work(s, p, n) for s, p, n in QUICK_WORKS if s in have]
    if not works and have:
        works = [Work(have[0], "default", QUICK_WORKS[0][2])]
    return Matrix(
        scenarios=[w.label for w in works],
        modes=modes,
        num_envs=[8],
        num_workers=sorted({1, cores}),
        env_steps=QUICK_WORKS[0][2],
        repeats=3,
        suite="quick",
        work_list=works,
    )


def standard_matrix(scenarios: list[str] | None = None) -> Matrix:
    """The leaderboard's matrix: the standard work of every scenario at its default preset.

    Every available mode, 8 and 32 envs, workers 1, 2, 4, ... up to the usable cores.
    """
    return Matrix(
        scenarios=scenarios or available_scenarios(),
        num_envs=[8, 32],
        num_workers=worker_counts(),
        suite="standard",
    )


def run_matrix(
    matrix: Matrix,
    progress: Progress | None = None,
    label: str | None = None,
    command: str = "",
    open_session: Callable = _open_session,
    configs: list[Config] | None = None,
) -> dict:
    """Run every configuration of ``matrix``; return a schema-valid result dict.

    Args:
        matrix: what to run.
        progress: called with ``(advance, description)``; the total is
            :func:`total_units` of the matrix.
        label: machine label stored in the result.
        command: the command line, stored in the result.
        open_session: session factory (tests pass a fake).
        configs: rows to run instead of ``matrix.configs()`` (autotune's sweep); the
            matrix still gives repeats, warm-up and the settings record.
    """
    machine = machine_record(label)
    code = code_record()  # before the run: the code that is about to measure
    configs = matrix.configs() if configs is None else configs
    tick = progress or (lambda advance, description: None)
    groups: dict[tuple[str, int], list[Config]] = {}
    for config in configs:
        groups.setdefault((config.work.hash, config.num_envs), []).append(config)
    rows = []
    stats_of: dict[int, list[RunStats]] = {}
    for group in groups.values():
        for row, stats in _run_group(group, matrix, tick, open_session):
            stats_of[len(rows)] = stats
            rows.append(row)
    _derive(rows, stats_of, {c.work.hash: c.work for c in configs}, matrix, tick)
    machine["load_average_end"] = load_average()
    machine["free_cores_end"] = free_cores()
    works = {c.work.hash: c.work.to_dict() for c in configs}
    result = {
        "schema": SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        **code,
        "suite": matrix.suite,
        "machine": machine,
        "settings": {
            "repeats": matrix.repeats,
            "warmup_fraction": matrix.warmup_fraction,
            "interleave": matrix.interleave,
            "modes": list(dict.fromkeys(c.mode for c in configs)),
            "num_envs": sorted({c.num_envs for c in configs}),
            "num_workers": sorted({c.num_workers for c in configs}),
        },
        "works": works,
        "work_hash": results_work_hash(rows),
        "rows": rows,
    }
    return check(result)


def open_units(matrix: Matrix) -> float:
    """Progress units of a row's set-up and warm-up: :data:`SETUP_UNITS` and the warm-up's
    share of a repeat."""
    return SETUP_UNITS + matrix.warmup_fraction


def total_units(matrix: Matrix, configs: list[Config] | None = None) -> float:
    """Progress units of a run, in timed repeats: per row :func:`open_units` and one per
    repeat. Repeats of different rows differ in length (modes, scenarios), but every group
    of rows alternates the same way, so units done per second, averaged over the run so
    far, estimate the time left; counting set-up and warm-up as a whole repeat made that
    estimate far too short while the rows were being opened."""
    configs = matrix.configs() if configs is None else configs
    return len(configs) * (open_units(matrix) + matrix.repeats)


def _new_row(config: Config, matrix: Matrix) -> dict[str, Any]:
    work = config.work
    return {
        "scenario": work.scenario,
        "preset": work.preset,
        "mode": config.mode,
        "num_envs": config.num_envs,
        "num_workers": config.num_workers,
        "work_hash": work.hash,
        "status": "ok",
        "error": None,
        "n_agents": None,
        "steps_per_env": steps_per_env(work, config.num_envs),
        "env_steps": None,
        "repeats": matrix.repeats,
        "warmup_steps": 0,
        "setup_s": None,
        "wall_s": [],
        "cpu_s": [],
        "harness_s": [],
        "worker_processes": None,
        "parent_peak_rss_mb": None,
        "worker_peak_rss_mb": None,
        "workers_peak_rss_mb_total": None,
        "rss_method": "none",
    }


class _Slot:
    """One row while it runs: its config, session, results and progress."""

    def __init__(self, config: Config, matrix: Matrix):
        self.config = config
        self.row = _new_row(config, matrix)
        self.session = None
        self.stats: list[RunStats] = []
        self.pids: list[int] = []
        self.units = 0.0  # progress units reported so far

    @property
    def ok(self) -> bool:
        return self.row["status"] == "ok"

    def fail(self, exc: BaseException, matrix: Matrix, tick: Progress) -> None:
        label = self.config.label
        log.warning("%s failed: %s: %s", label, type(exc).__name__, exc)
        self.row.update(status="error", error=f"{type(exc).__name__}: {exc}")
        self.stats = []
        self.close()
        total = open_units(matrix) + matrix.repeats
        tick(total - self.units, f"{label}: failed")
        self.units = total

    def close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            try:
                session.close()
            except Exception as exc:  # a failed close must not hide the row's figures
                log.warning("%s: close() failed: %s", self.config.label, exc)


def _open(slot: _Slot, matrix: Matrix, tick: Progress, open_session: Callable) -> None:
    """Build, reset and warm up one row's session (untimed)."""
    config = slot.config
    tick(0, f"{config.label}: starting")
    before = set(worker_pids())  # e.g. a Ray cluster left by an earlier row
    t0 = time.perf_counter()
    slot.session = session = open_session(
        config.work, config.mode, config.num_envs, config.num_workers or None
    )
    slot.row["n_agents"] = session.n_agents
    session.reset()
    slot.row["setup_s"] = round(time.perf_counter() - t0, 4)
    warm = math.ceil(session.steps_per_env * matrix.warmup_fraction)
    if warm:
        session.run(warm)
        session.reset()
    slot.row["warmup_steps"] = warm
    slot.pids = [p for p in session.worker_pids() if p not in before]
    slot.units = open_units(matrix)
    tick(slot.units, f"{config.label}: warmed up")


def _repeat(slot: _Slot, r: int, matrix: Matrix, tick: Progress) -> None:
    slot.stats.append(slot.session.run())
    slot.session.reset()
    slot.units += 1
    tick(1, f"{slot.config.label}: repeat {r + 1}/{matrix.repeats}")


def _finish(slot: _Slot, parent_peak: float) -> tuple[dict, list[RunStats]]:
    row, stats = slot.row, slot.stats
    row["parent_peak_rss_mb"] = round(parent_peak, 1)
    if slot.ok:
        if len({s.reward_sum for s in stats}) > 1:
            log.warning("%s: repeats gave different reward sums %s: the work is not "
                        "deterministic", slot.config.label, [s.reward_sum for s in stats])
        row["worker_processes"] = len(slot.pids)
        worker_max, worker_sum, method = children_peak_rss_mb(slot.pids)
        row["worker_peak_rss_mb"] = _round(worker_max, 1)
        row["workers_peak_rss_mb_total"] = _round(worker_sum, 1)
        row["rss_method"] = method
        row["env_steps"] = stats[0].env_steps
        row["wall_s"] = [round(s.wall_s, 6) for s in stats]
        row["cpu_s"] = [round(s.cpu_s, 6) for s in stats]
        row["harness_s"] = [round(s.harness_s, 6) for s in stats]
    return row, stats


def _run_group(
    configs: list[Config], matrix: Matrix, tick: Progress, open_session: Callable
) -> list[tuple[dict, list[RunStats]]]:
    """Run rows that share a work and ``num_envs``.

    Interleaved (the default): every session is opened and warmed up first, then the
    repeats alternate between them (repeat 1 of every row, then repeat 2, ...), so a change
    in the machine's load hits every mode alike. The parent's peak RSS is then the group's.
    Otherwise one row after another, each with its own parent peak.
    """
    slots = [_Slot(c, matrix) for c in configs]
    out: list[tuple[dict, list[RunStats]]] = []
    batches = [slots] if matrix.interleave else [[s] for s in slots]
    try:
        for batch in batches:
            gc.collect()  # the previous rows' garbage is not these rows' cost
            reset_peak_rss()
            for slot in batch:
                try:
                    _open(slot, matrix, tick, open_session)
                except Exception as exc:
                    slot.fail(exc, matrix, tick)
            for r in range(matrix.repeats):
                for slot in batch:
                    if slot.ok:
                        try:
                            _repeat(slot, r, matrix, tick)
                        except Exception as exc:
                            slot.fail(exc, matrix, tick)
            parent_peak = self_peak_rss_mb()
            out.extend(_finish(slot, parent_peak) for slot in batch)
            for slot in batch:
                slot.close()
    finally:
        for slot in slots:
            slot.close()
    return out


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def _sig(x: float | None, digits: int = 4) -> float | None:
    """Round to ``digits`` significant digits (keeps the JSON readable); NaN and inf -> None."""
    if x is None or not math.isfinite(x):
        return None
    if x == 0:
        return 0.0
    return float(round(x, digits - 1 - int(math.floor(math.log10(abs(x))))))


def _derive(
    rows: list[dict],
    stats_of: dict[int, list[RunStats]],
    works: dict[str, Work],
    matrix: Matrix,
    tick: Progress,
) -> None:
    """Fill in the figures that compare rows (speedup, census of events and sim time)."""
    serial: dict[tuple[str, int], tuple[dict, RunStats]] = {}
    for i, row in enumerate(rows):
        if row["mode"] == "serial" and row["status"] == "ok":
            serial[(row["work_hash"], row["num_envs"])] = (row, stats_of[i][0])
    census: dict[tuple[str, int], RunStats] = {k: s for k, (_, s) in serial.items()}
    for i, row in enumerate(rows):
        stats = stats_of[i]
        figures = dict.fromkeys(
            ["env_steps_per_s", "env_steps_per_s_min", "env_steps_per_s_max", "spread",
             "agent_steps_per_s", "sim_time_per_s", "events_per_s", "speedup_vs_serial",
             "parallel_efficiency", "parent_cpu_us_per_step", "harness_us_per_step",
             "reward_sum", "sim_events", "sim_time", "matches_serial"]
        )
        row.update(figures)
        if not stats:
            continue
        steps = stats[0].env_steps
        rates = [steps / s.wall_s for s in stats]
        rate = statistics.median(rates)
        row["env_steps_per_s"] = _sig(rate)
        row["env_steps_per_s_min"] = _sig(min(rates))
        row["env_steps_per_s_max"] = _sig(max(rates))
        row["spread"] = _sig((max(rates) - min(rates)) / rate, 3)
        row["agent_steps_per_s"] = _sig(rate * row["n_agents"])
        row["parent_cpu_us_per_step"] = _sig(statistics.median(s.cpu_s for s in stats)
                                             / steps * 1e6, 3)
        row["harness_us_per_step"] = _sig(statistics.median(s.harness_s for s in stats)
                                          / steps * 1e6, 3)
        row["reward_sum"] = stats[0].reward_sum
        key = (row["work_hash"], row["num_envs"])
        if key in serial:
            ref_row, _ = serial[key]
            # Compare exact rates, not the rounded figures already stored.
            ref_rate = statistics.median(
                ref_row["env_steps"] / w for w in ref_row["wall_s"]
            )
            speedup = rate / ref_rate
            row["speedup_vs_serial"] = _sig(speedup, 3)
            row["parallel_efficiency"] = _sig(speedup / max(row["num_workers"], 1), 3)
        if key not in census and matrix.census:
            tick(0, f"{row['scenario']}/{row['preset']} n{row['num_envs']}: serial census")
            census[key] = _census(works[row["work_hash"]], row["num_envs"])
        ref = census.get(key)
        if ref is None:
            continue
        row["matches_serial"] = math.isclose(
            row["reward_sum"], ref.reward_sum, rel_tol=1e-6, abs_tol=1e-6
        )
        if row["matches_serial"]:
            row["sim_events"] = ref.sim_events
            row["sim_time"] = _sig(ref.sim_time, 8)
            row["events_per_s"] = _sig(ref.sim_events * rate / steps)
            row["sim_time_per_s"] = _sig(ref.sim_time * rate / steps)
        else:
            log.warning(
                "%s/%s %s n%d: reward sum %.6g differs from serial's %.6g: the backend does "
                "not follow the same trajectories, so events/s and sim-time/s are left out",
                row["scenario"], row["preset"], row["mode"], row["num_envs"],
                row["reward_sum"], ref.reward_sum,
            )


def _census(work: Work, num_envs: int) -> RunStats | None:
    """An untimed serial run of ``work``, for its events and simulated time."""
    try:
        with SerialSession(work, num_envs) as session:
            session.reset()
            return session.run()
    except Exception as exc:
        log.warning("serial census of %s failed: %s", work.label, exc)
        return None


def with_steps(matrix: Matrix, env_steps: int) -> Matrix:
    """A copy of ``matrix`` doing ``env_steps`` per row."""
    return replace(matrix, env_steps=env_steps)
