"""Autotune: sweep workers and envs per worker for one scenario; recommend the fastest.

Like PufferLib's autotune, it answers "which backend, how many workers and how many envs
per worker sample this scenario fastest on this machine?" by measuring. In-process modes
(``serial``, ``roundrobin``) are candidates too: for a cheap scenario on few cores they can
win, and the recommendation says so.
"""

from __future__ import annotations

import math

from deszoo.bench.machine import worker_counts
from deszoo.bench.modes import available_modes, is_in_process
from deszoo.bench.runner import Config, Matrix
from deszoo.bench.work import Work
from deszoo.errors import ConfigError

__all__ = [
    "ENVS_PER_WORKER",
    "autotune_configs",
    "autotune_matrix",
    "calibrate_steps",
    "recommend",
]

ENVS_PER_WORKER = (1, 2, 4, 8, 16)
AUTOTUNE_ENV_STEPS = 8192


def calibrate_steps(
    scenario: str,
    preset: str = "default",
    target_s: float = 0.3,
    lo: int = 512,
    hi: int = 16384,
) -> int:
    """Env steps that take about ``target_s`` serially here: a power of two in lo..hi.

    A short untimed-for-the-result serial probe measures the step cost; autotune uses it so
    that a heavy scenario does not take minutes per configuration.
    """
    from deszoo.bench.modes import SerialSession

    probe = Work(scenario, preset, env_steps=64)
    with SerialSession(probe, 1) as session:
        session.reset()
        stats = session.run()
    per_step = stats.wall_s / stats.env_steps
    steps = 2 ** max(0, round(math.log2(max(target_s / per_step, 1))))
    return int(min(max(steps, lo), hi))


def autotune_matrix(
    scenario: str,
    preset: str = "default",
    env_steps: int = AUTOTUNE_ENV_STEPS,
    repeats: int = 3,
    seed: int = 0,
) -> Matrix:
    """The settings of an autotune run (its rows come from :func:`autotune_configs`)."""
    return Matrix(scenarios=[scenario], presets=[preset], env_steps=env_steps,
                  repeats=repeats, seed=seed, suite="autotune")


def autotune_configs(
    matrix: Matrix,
    modes: list[str] | None = None,
    workers: list[int] | None = None,
    envs_per_worker: tuple[int, ...] | list[int] = ENVS_PER_WORKER,
) -> list[Config]:
    """Every multiprocess mode at ``w`` workers x ``e`` envs per worker, and every
    in-process mode at each resulting ``num_envs`` (``num_envs = w * e``).

    Args:
        matrix: from :func:`autotune_matrix`.
        modes: default every available mode except ``ray``.
        workers: default 1, 2, 4, ... up to the usable cores.
        envs_per_worker: envs each worker hosts.
    """
    if modes is None:
        modes = [m for m in available_modes() if m != "ray"]
    unknown = [m for m in modes if m not in available_modes()]
    if unknown:
        raise ConfigError(f"unknown mode(s) {unknown}; available: {available_modes()}")
    workers = workers or worker_counts()
    work: Work = matrix.works()[0]
    sizes = sorted({w * e for w in workers for e in envs_per_worker})
    configs = []
    for n in sizes:
        for mode in modes:
            if is_in_process(mode):
                configs.append(Config(work, mode, n, 0))
            else:
                configs.extend(Config(work, mode, n, w) for w in workers
                               if n % w == 0 and n // w in envs_per_worker)
    return configs


def recommend(result: dict, tolerance: float = 0.05) -> dict | None:
    """What to use: the fastest vector env configuration, and a smaller one nearly as fast.

    Returns ``None`` if no row ran, else a dict with ``vector`` (the fastest row of a
    ``make_vec`` backend, or ``None`` if only ``serial`` ran), ``compact`` (the smallest
    ``num_envs`` of a backend within ``tolerance`` of it), ``fastest`` (the fastest row of
    any mode: ``serial`` can beat every vector env when steps are cheap and cores few) and
    ``snippet`` (the ``make_vec`` call for ``vector``).
    """
    rows = [r for r in result["rows"] if r["status"] == "ok"]
    if not rows:
        return None
    fastest = max(rows, key=lambda r: r["env_steps_per_s"])
    vec_rows = [r for r in rows if r["mode"] != "serial"]
    if not vec_rows:
        return {"fastest": fastest, "vector": None, "compact": None, "snippet": None}
    best = max(vec_rows, key=lambda r: r["env_steps_per_s"])
    near = [r for r in vec_rows
            if r["env_steps_per_s"] >= (1 - tolerance) * best["env_steps_per_s"]]
    compact = min(near, key=lambda r: (r["num_envs"], r["num_workers"],
                                       -r["env_steps_per_s"]))
    return {"fastest": fastest, "vector": best, "compact": compact, "snippet": snippet(best)}


def snippet(row: dict, extra: str = "") -> str:
    """The ``make_vec`` call a row of a vector backend stands for (``extra``: more backend
    options, as ``", spin_us=0"``)."""
    workers = "" if is_in_process(row["mode"]) else f", num_workers={row['num_workers']}"
    workers += extra
    name = row["scenario"]
    if ":" in name:  # a user's env: make_vec takes the class or factory itself
        module, _, attr = name.partition(":")
        preset = "" if row["preset"] == "default" else f", preset={row['preset']!r}"
        factory = (attr if not preset
                   else f"functools.partial({attr}{preset})")
        return (f"deszoo.vector.make_vec({factory}, num_sims={row['num_envs']}, "
                f"backend={row['mode']!r}{workers})  # from {module} import {attr}")
    return (f"deszoo.vector.make_vec({name!r}, num_sims={row['num_envs']}, "
            f"backend={row['mode']!r}{workers}, env_kwargs={{'preset': {row['preset']!r}}})")
