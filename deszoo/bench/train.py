"""``deszoo bench --train``: timesteps/s inside a training loop, by learner and backend.

The other modes of the harness time env steps under a trivial policy; this one times what a
user of a learner sees: end-to-end timesteps/s (a timestep is a row, one agent of one
simulation, as SB3 counts), and the share of the wall time in each phase, measured by
wrapping the calls of each phase (:class:`deszoo.ppo.Phases`):

* ``env``: the vector env's calls as the learner makes them (SB3's ``step_async``,
  ``step_wait`` and ``reset``, with ``to_sb3``'s or SuperSuit's conversions; the PPO loop's
  ``step``, ``send``, ``recv`` and ``reset``: pipelined, only the waiting that is left);
* ``inference``: the policy's forward passes while collecting (SB3's ``policy.forward`` and
  ``predict_values``; the loop's sampling and bootstrap values);
* ``update``: SB3's ``train()``; the loop's advantages and gradient steps;
* ``other``: the rest (rollout buffers, tensors, callbacks).

Learners (:data:`LEARNERS`), each on the same settings (:class:`TrainSettings`, SB3 PPO's
``n_steps``, ``batch_size``, ``n_epochs`` and a 64x64 tanh MLP, torch on one thread):

* ``supersuit-chain``: the route of PettingZoo's SB3 tutorial, the reference:
  ``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1(num_cpus=workers)`` into SB3
  ``PPO("MlpPolicy")``;
* ``sb3``: the same PPO through ``to_sb3(make_vec(..., backend=B))``;
* ``ppo-loop``: deszoo's own loop (:mod:`deszoo.ppo`), ``collect="sync"``, on backend B;
* ``ppo-loop-halves``: the same loop over two halves, each ``send`` followed by its ``recv``:
  the synchronous form of the pipelined loop, bit-identical with it;
* ``ppo-loop-pipelined``: the loop double-buffered over the two halves (``send``/``recv``).

The two halves' rows run on multiprocess backends only (in one process there is nothing to
overlap); :func:`pipeline_lines` compares the pipelined loop with both synchronous forms.

Every run builds its vector env untimed (worker start-up is not training), then times
``learn`` (SB3) or the loop from its first reset to its last update. Rows alternate within
a repeat and the best repeat is reported, with the median beside it: on a shared machine
the best is the least disturbed run.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import math
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from deszoo.errors import ConfigError

__all__ = [
    "DEFAULT_BACKENDS",
    "LEARNERS",
    "TrainRow",
    "TrainSettings",
    "install_hint",
    "missing_packages",
    "pipeline_lines",
    "recommend",
    "run_once",
    "run_train",
    "train_rows",
]

LEARNERS = ("supersuit-chain", "sb3", "ppo-loop", "ppo-loop-halves", "ppo-loop-pipelined")
"""The learners of ``deszoo bench --train``, in the order of its table."""

NEEDS = {
    "supersuit-chain": ("torch", "stable_baselines3", "supersuit"),
    "sb3": ("torch", "stable_baselines3"),
    "ppo-loop": ("torch",),
    "ppo-loop-halves": ("torch",),
    "ppo-loop-pipelined": ("torch",),
}
"""The importable packages each learner needs."""

DEFAULT_BACKENDS = ("roundrobin", "shm")
"""The backends the learners run on unless ``--modes`` says."""

CHAIN = "supersuit-chain"
# The PPO loop's learners and how each collects (deszoo.ppo.train's ``collect``).
COLLECT = {"ppo-loop": "sync", "ppo-loop-halves": "halves", "ppo-loop-pipelined": "pipelined"}


@dataclass
class TrainSettings:
    """What every learner of a run trains with, and how much."""

    timesteps: int = 131_072  # per run, rounded up to whole rollouts (runs of 32,768
    # spread by 25% on 2 cores: the first update's start-up is a large part of them)
    n_steps: int = 64  # steps per row per rollout
    minibatch: int = 512
    epochs: int = 2
    hidden: int = 64
    repeats: int = 2
    seed: int = 0


@dataclass(frozen=True)
class TrainRow:
    """One learner on one backend for one scenario, batch size and worker count."""

    scenario: str
    preset: str
    learner: str
    backend: str  # "supersuit" for the chain (its own transport)
    num_sims: int
    num_workers: int  # 0 in the parent process (roundrobin)
    spin_us: float | None = None  # shm's spin_us (None: its default)

    @property
    def label(self) -> str:
        """The backend with its setting, for the table (``shm spin 0``)."""
        return self.backend if self.spin_us is None else f"{self.backend} spin {self.spin_us:g}"


def missing_packages(learners: list[str]) -> list[str]:
    """The packages ``learners`` need that this install lacks (import names)."""
    need = dict.fromkeys(p for lr in learners for p in NEEDS[lr])
    return [p for p in need if importlib.util.find_spec(p) is None]


def install_hint(missing: list[str]) -> str:
    """What to install for ``missing`` (a CPU torch first, so pip takes no CUDA build)."""
    steps = []
    if "torch" in missing:
        steps.append("pip install torch --index-url https://download.pytorch.org/whl/cpu")
    if {"stable_baselines3", "supersuit"} & set(missing):
        steps.append("pip install 'deszoo[sb3]'")
    return "; then ".join(steps)


def train_rows(scenarios: list[tuple[str, str]], learners: list[str], backends: list[str],
               num_sims: list[int], workers: list[int],
               spins: tuple[float | None, ...] = (None,)) -> list[TrainRow]:
    """Every row of a run: per scenario, batch size and worker count, the chain first, then
    each other learner on each backend (the loop's halves on multiprocess ones);
    ``shm`` once per ``spins`` value (``None``: its default spin)."""
    unknown = [lr for lr in learners if lr not in LEARNERS]
    if unknown:
        raise ConfigError(f"unknown learner(s) {unknown}; learners are {list(LEARNERS)}")
    rows = []
    for (name, preset) in scenarios:
        for n in num_sims:
            for w in workers:
                for learner in [lr for lr in LEARNERS if lr in learners]:
                    if learner == CHAIN:
                        rows.append(TrainRow(name, preset, learner, "supersuit", n, w))
                        continue
                    for b in backends:
                        if COLLECT.get(learner, "sync") != "sync" and (b == "roundrobin"
                                                                       or n < 2):
                            continue
                        for spin in spins if b == "shm" else (None,):
                            rows.append(TrainRow(name, preset, learner, b, n,
                                                 0 if b == "roundrobin" else w, spin))
    # one row per distinct config: roundrobin ignores the worker count
    return list(dict.fromkeys(rows))


def _env(row: TrainRow) -> Any:
    """One env of ``row`` (a registered scenario or ``MODULE:ATTR``, with the same defaults
    as every command)."""
    from deszoo.episodes import env_factory

    return env_factory(row.scenario, row.preset)()


def _vec_args(row: TrainRow) -> tuple[Any, dict[str, Any]]:
    """What ``make_vec`` takes for ``row``: a registered name and its preset, or a user's
    env as a picklable factory (workers import its module by name)."""
    from deszoo.episodes import env_factory, is_user_env

    if is_user_env(row.scenario):
        return env_factory(row.scenario, row.preset), {}
    return row.scenario, {"preset": row.preset}


def _timed_vec_env(venv, phases):
    """``venv`` (an SB3 ``VecEnv``) with its steps and resets timed as ``env``."""
    from stable_baselines3.common.vec_env import VecEnvWrapper

    class Timed(VecEnvWrapper):
        def __init__(self, inner):
            super().__init__(inner)
            self.reset = phases.wrap(inner.reset, "env")
            self.step_async = phases.wrap(inner.step_async, "env")
            self.step_wait = phases.wrap(inner.step_wait, "env")

        def reset(self):  # replaced per instance above
            return self.venv.reset()

        def step_wait(self):  # replaced per instance above
            return self.venv.step_wait()

    return Timed(venv)


def _sb3_run(row: TrainRow, s: TrainSettings):
    import numpy as np
    import torch
    from stable_baselines3 import PPO

    from deszoo.ppo import Phases

    phases = Phases()
    torch.set_num_threads(1)  # as the PPO loop does: the cores go to the workers
    torch.manual_seed(s.seed)
    np.random.seed(s.seed)  # SB3's own draws; the chain's envs cannot be seeded through PPO
    if row.learner == CHAIN:
        import supersuit as ss

        env = ss.concat_vec_envs_v1(
            ss.pettingzoo_env_to_vec_env_v1(_env(row)),
            row.num_sims, num_cpus=row.num_workers, base_class="stable_baselines3")
        seed = None  # SuperSuit's SB3 wrapper has no seed(): PPO(seed=...) fails on it
    else:
        from deszoo.vector import make_vec, to_sb3

        source, kwargs = _vec_args(row)
        env = to_sb3(make_vec(source, row.num_sims, backend=row.backend,
                              num_workers=row.num_workers or None, seed=s.seed,
                              autoreset_mode="SameStep", env_kwargs=kwargs,
                              **_backend_options(row)))
        seed = s.seed
    try:
        env = _timed_vec_env(env, phases)
        model = PPO("MlpPolicy", env, n_steps=s.n_steps, batch_size=s.minibatch,
                    n_epochs=s.epochs, seed=seed, device="cpu", verbose=0,
                    policy_kwargs={"net_arch": [s.hidden, s.hidden]})
        policy = model.policy
        policy.forward = phases.wrap(policy.forward, "inference")
        policy.predict_values = phases.wrap(policy.predict_values, "inference")
        model.train = phases.wrap(model.train, "update")
        rollout = s.n_steps * env.num_envs
        total = math.ceil(s.timesteps / rollout) * rollout
        t0 = time.perf_counter()
        model.learn(total)
        phases.wall = time.perf_counter() - t0
        return model.num_timesteps, phases
    finally:
        env.close()


def _backend_options(row: TrainRow) -> dict[str, Any]:
    return {} if row.spin_us is None else {"spin_us": row.spin_us}


def _loop_run(row: TrainRow, s: TrainSettings):
    from deszoo import ppo

    probe = _env(row)
    rows = row.num_sims * len(probe.possible_agents)
    probe.close()
    rollout = s.n_steps * rows
    updates = math.ceil(s.timesteps / rollout)
    phases = ppo.Phases()
    source, kwargs = _vec_args(row)
    ppo.train(source, timesteps=updates * rollout, num_envs=row.num_sims, seed=s.seed,
              n_steps=s.n_steps, epochs=s.epochs, minibatch=s.minibatch, hidden=s.hidden,
              backend=row.backend, num_workers=row.num_workers or None,
              collect=COLLECT[row.learner],
              phases=phases, **kwargs, **_backend_options(row))
    return updates * rollout, phases


def run_once(row: TrainRow, settings: TrainSettings) -> dict[str, Any]:
    """One timed training run of ``row``: its timesteps, wall time and seconds by phase."""
    from deszoo.errors import MasksIgnoredWarning

    with warnings.catch_warnings():
        # SB3's PPO("MlpPolicy") ignores the masks on purpose: the measurement is speed.
        warnings.simplefilter("ignore", MasksIgnoredWarning)
        warnings.filterwarnings("ignore", "The `render_mode` attribute")  # SB3 on SuperSuit
        if row.learner in ("sb3", CHAIN):
            timesteps, phases = _sb3_run(row, settings)
        else:
            timesteps, phases = _loop_run(row, settings)
    # The run's cycles collected now, so that no SuperSuit ProcConcatVec is still alive when
    # the next run forks its workers (its __del__ in a forked child prints an AssertionError).
    gc.collect()
    return {"timesteps": int(timesteps), "wall_s": phases.wall,
            "seconds": dict(phases.seconds), "shares": phases.shares()}


def _summary(row: TrainRow, runs: list[dict]) -> dict[str, Any]:
    rates = [r["timesteps"] / r["wall_s"] for r in runs]
    best = max(range(len(runs)), key=rates.__getitem__)
    return {**dataclasses.asdict(row), "timesteps": runs[best]["timesteps"],
            "timesteps_per_s": rates[best], "timesteps_per_s_median": statistics.median(rates),
            "rates": rates, "shares": runs[best]["shares"], "error": None}


def run_train(rows: list[TrainRow], settings: TrainSettings,
              progress: Callable[[float, str], None] | None = None) -> dict[str, Any]:
    """Run every row ``settings.repeats`` times, alternating rows within each repeat.

    Returns ``{"settings", "machine", "rows"}``; each row has its best and median
    timesteps/s, the phase shares of its best run and ``x_chain``, its best over the
    chain's best for the same scenario, batch and workers (``None`` without a chain row).
    A row that raised has ``error`` and no rates.
    """
    from deszoo.bench.machine import free_cores, load_average, machine_record

    machine = machine_record()
    runs: dict[TrainRow, list[dict]] = {r: [] for r in rows}
    errors: dict[TrainRow, str] = {}
    for rep in range(settings.repeats):
        for row in rows:
            if row in errors:
                continue
            if progress is not None:
                progress(0, f"{row.learner} on {row.backend} ({rep + 1}/{settings.repeats})")
            try:
                runs[row].append(run_once(row, settings))
            except Exception as exc:  # a row that fails is reported, the others still run
                errors[row] = f"{type(exc).__name__}: {exc}"
            if progress is not None:
                progress(1, "")
    machine["load_average_end"] = load_average()
    machine["free_cores_end"] = free_cores()
    out = []
    for row in rows:
        if row in errors or not runs[row]:
            out.append({**dataclasses.asdict(row), "error": errors.get(row, "no run")})
        else:
            out.append(_summary(row, runs[row]))
    chain = {(r["scenario"], r["preset"], r["num_sims"], r["num_workers"]): r["timesteps_per_s"]
             for r in out if r["learner"] == CHAIN and r["error"] is None}
    for r in out:
        if r["error"] is None:
            ref = chain.get((r["scenario"], r["preset"], r["num_sims"], r["num_workers"]))
            if ref is None and r["backend"] == "roundrobin":  # roundrobin has 0 workers
                ref = next((v for k, v in chain.items()
                            if k[:3] == (r["scenario"], r["preset"], r["num_sims"])), None)
            r["x_chain"] = None if ref is None else r["timesteps_per_s"] / ref
    return {"settings": dataclasses.asdict(settings), "machine": machine, "rows": out}


COLUMNS = [("scenario", "left"), ("sims", "right"), ("workers", "right"),
           ("learner", "left"), ("backend", "left"), ("timesteps/s", "right"),
           ("median", "right"), ("x chain", "right"), ("env", "right"),
           ("inference", "right"), ("update", "right"), ("other", "right")]


def _row(r: dict[str, Any]) -> TrainRow:
    return TrainRow(**{f.name: r.get(f.name) for f in dataclasses.fields(TrainRow)})


def row_cells(r: dict[str, Any]) -> list[str]:
    """A result row as the table's cells."""
    head = [f"{r['scenario']}/{r['preset']}", str(r["num_sims"]), str(r["num_workers"]),
            r["learner"], _row(r).label]
    if r["error"] is not None:
        return head + ["failed: " + r["error"].splitlines()[0][:60]] + [""] * 6
    sh = r["shares"]
    return head + [f"{r['timesteps_per_s']:,.0f}", f"{r['timesteps_per_s_median']:,.0f}",
                   "" if r["x_chain"] is None else f"{r['x_chain']:.2f}x",
                   *(f"{sh[p]:.0%}" for p in ("env", "inference", "update", "other"))]


def caption(result: dict[str, Any]) -> str:
    """How the table was measured: settings, machine, load."""
    s, m = result["settings"], result["machine"]

    def load(x: list[float] | None) -> str:
        return "n/a" if x is None else " ".join(f"{v:.2f}" for v in x)

    return (f"SB3 PPO settings for every learner: n_steps={s['n_steps']}, "
            f"batch={s['minibatch']}, epochs={s['epochs']}, MLP {s['hidden']}x{s['hidden']}, "
            f"torch 1 thread; about {s['timesteps']:,} timesteps per run, best of "
            f"{s['repeats']} alternating runs. {m['usable_cores']} usable cores "
            f"({m['cpu_model']}); load average {load(m['load_average_start'])} at the "
            f"start, {load(m['load_average_end'])} at the end; free cores "
            f"{m['free_cores_start']} / {m['free_cores_end']}.")


def pipeline_lines(result: dict[str, Any]) -> list[str]:
    """The pipelined loop's speed over its synchronous form (``halves``) and over the plain
    loop (``sync``), per scenario, batch and workers that ran both."""
    rates = {_row(r): r["timesteps_per_s"]
             for r in result["rows"] if r["error"] is None and r["learner"] in COLLECT}
    lines = []
    for row, rate in rates.items():
        if row.learner != "ppo-loop-pipelined":
            continue
        refs = [(words, rates.get(dataclasses.replace(row, learner=learner)))
                for words, learner in (("its synchronous form (halves)", "ppo-loop-halves"),
                                       ("the plain loop (sync)", "ppo-loop"))]
        parts = [f"{rate / ref:.2f}x {words}" for words, ref in refs if ref is not None]
        if parts:
            lines.append(f"pipelined, {row.scenario}/{row.preset} {row.num_sims} sims on "
                         f"{row.label} with {row.num_workers} workers: " + ", ".join(parts))
    return lines


def tune_workers(cores: int, num_sims: int) -> list[int]:
    """Worker counts ``--train --autotune`` tries: one, every core but the learner's, and
    every core (at most one per simulation)."""
    return sorted({min(w, num_sims) for w in (1, max(1, cores - 1), cores)})


def recommend(result: dict[str, Any]) -> dict[str, Any] | None:
    """The fastest row of a training run (``None`` if none ran): ``best``, ``x_roundrobin``
    (its speed over the same learner on ``roundrobin`` with the same batch, or ``None``),
    ``leaves_core`` (it has fewer workers than usable cores: the learner keeps one) and
    ``snippet`` (its ``make_vec`` call)."""
    rows = [r for r in result["rows"] if r["error"] is None and r["learner"] != CHAIN]
    if not rows:
        return None
    best = max(rows, key=lambda r: r["timesteps_per_s"])
    rr = [r["timesteps_per_s"] for r in rows if r["backend"] == "roundrobin"
          and r["learner"] == best["learner"] and r["num_sims"] == best["num_sims"]
          and r["scenario"] == best["scenario"] and r["preset"] == best["preset"]]
    from deszoo.bench.autotune import snippet

    spin = "" if best.get("spin_us") is None else f", spin_us={best['spin_us']:g}"
    call = snippet({"scenario": best["scenario"], "preset": best["preset"], "mode": best["backend"],
                    "num_envs": best["num_sims"], "num_workers": best["num_workers"]}, spin)
    cores = result["machine"]["usable_cores"]
    return {"best": best, "x_roundrobin": best["timesteps_per_s"] / rr[0] if rr else None,
            "leaves_core": 0 < best["num_workers"] < cores, "snippet": call}


def recommendation_lines(rec: dict[str, Any] | None) -> list[str]:
    """``recommend``'s answer in words."""
    if rec is None:
        return ["no learner ran; nothing to recommend"]
    b = rec["best"]
    where = b["backend"]
    if b["num_workers"]:
        where += f" with {b['num_workers']} worker{'s' * (b['num_workers'] > 1)}"
    if b.get("spin_us") is not None:
        where += f", spin_us={b['spin_us']:g}"
    x = "" if rec["x_roundrobin"] is None or b["backend"] == "roundrobin" else (
        f" ({rec['x_roundrobin']:.2f}x roundrobin)")
    lines = [f"fastest for {b['learner']}: {b['num_sims']} sims on {where}: "
             f"{b['timesteps_per_s']:,.0f} timesteps/s{x}"]
    if rec["leaves_core"]:
        lines.append("it leaves the learner a core (fewer workers than usable cores)")
    lines.append(rec["snippet"])
    return lines
