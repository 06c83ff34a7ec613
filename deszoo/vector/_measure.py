"""Side-by-side throughput of the vector backends, and where the parent's time goes.

Run ``python -m deszoo.vector._measure`` (``--help`` for options). It is a measurement,
not a test: the machine is shared and has few cores, so compare ratios within one run.

For each scenario it reports env-steps/s of a plain loop over the envs (no vector env),
``roundrobin``, ``supersuit`` (``num_cpus=2``) and ``shm`` (2 workers); for ``shm`` and
``supersuit`` it also reports the parent's own CPU time per env step (``time.process_time``
around ``step`` only, so the policy is excluded; the parent sleeps while workers run) and,
with ``--profile``, a cProfile breakdown of the parent's ``step``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from typing import Any

import numpy as np

import deszoo
from deszoo.vector import make_vec
from deszoo.vector.testing import legal_last

SCENARIOS = {
    "light": ("jobshop_v0", {}),
    "heavy": ("traffic_v0", {"preset": "large"}),
}


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def free_cores(seconds: float = 1.0, procs: int = 2) -> float:
    """CPU seconds per wall second that ``procs`` spinning processes get: cores free now."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    workers = [ctx.Process(target=_spin, args=(seconds,)) for _ in range(procs)]
    c0 = os.times()
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - start
    c1 = os.times()
    return (c1.children_user - c0.children_user + c1.children_system - c0.children_system) / wall


def plain_loop(name: str, kwargs: dict, num_envs: int, seconds: float) -> dict[str, float]:
    """The envs stepped directly through the array API: the ceiling of one process."""
    envs = [deszoo.make(name, **kwargs) for _ in range(num_envs)]
    for i, env in enumerate(envs):
        env.reset_arrays(i)
    steps, events = 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for env in envs:
            if env.episode_over:
                env.reset_arrays(None)
                continue
            before = env.num_events
            env.step_arrays(legal_last(env.mask_buf))
            events += env.num_events - before
        steps += num_envs
    wall = time.perf_counter() - start
    return {"env_steps_per_s": steps / wall, "events_per_step": events / max(steps, 1)}


def run_vec(vec: Any, seconds: float, warmup: int = 20, profile: bool = False) -> dict[str, Any]:
    """Step ``vec`` with a cheap mask-following policy for ``seconds``; time the parent."""
    _, infos = vec.reset(seed=0)
    for _ in range(warmup):
        *_, infos = vec.step(legal_last(infos["action_mask"]))
    profiler = cProfile.Profile() if profile else None
    vsteps, parent_cpu = 0, 0.0
    events0 = vec.num_events().sum()
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        acts = legal_last(infos["action_mask"])
        c0 = time.process_time()
        if profiler is not None:
            profiler.enable()
        *_, infos = vec.step(acts)
        if profiler is not None:
            profiler.disable()
        parent_cpu += time.process_time() - c0
        vsteps += 1
    wall = time.perf_counter() - start
    env_steps = vsteps * vec.num_sims
    out = {
        "env_steps_per_s": env_steps / wall,
        "parent_us_per_env_step": 1e6 * parent_cpu / env_steps,
        "vec_steps": vsteps,
        "events_per_s": (vec.num_events().sum() - events0) / wall,
    }
    if profiler is not None:
        buf = io.StringIO()
        stats = pstats.Stats(profiler, stream=buf)
        stats.sort_stats("tottime").print_stats(14)
        out["profile"] = buf.getvalue()
        out["profiled_us_per_vec_step"] = 1e6 * stats.total_tt / vsteps
    return out


def measure(which: list[str], num_envs: int, seconds: float, profile: bool) -> list[str]:
    lines = [
        f"load average {os.getloadavg()[0]:.2f}; 2 spinning processes got "
        f"{free_cores():.2f} cores (2.00 = an idle 2-core machine)"
    ]
    for key in which:
        name, kwargs = SCENARIOS[key]
        lines.append(f"== {key}: {name} {kwargs}, {num_envs} envs, {seconds:g} s per backend")
        plain = plain_loop(name, kwargs, num_envs, seconds)
        lines.append(
            f"plain loop        {plain['env_steps_per_s']:10.0f} env-steps/s "
            f"({plain['events_per_step']:.0f} SimPy events per env step)"
        )
        results = {}
        for label, opts in (
            ("roundrobin", dict(backend="roundrobin")),
            ("supersuit(2 cpu)", dict(backend="supersuit", num_workers=2)),
            ("shm(2 workers)", dict(backend="shm", num_workers=2)),
        ):
            vec = make_vec(name, num_envs, **opts, **kwargs)
            try:
                results[label] = r = run_vec(vec, seconds)
            finally:
                vec.close()
            lines.append(
                f"{label:17s} {r['env_steps_per_s']:10.0f} env-steps/s, parent "
                f"{r['parent_us_per_env_step']:6.1f} us CPU per env step"
            )
        rr, ss, shm = (results[k]["env_steps_per_s"] for k in results)
        lines.append(
            f"ratios: shm/supersuit {shm / ss:.2f}x, shm/roundrobin {shm / rr:.2f}x, "
            f"supersuit/roundrobin {ss / rr:.2f}x"
        )
        if profile:
            vec = make_vec(name, num_envs, backend="shm", num_workers=2, **kwargs)
            try:
                r = run_vec(vec, seconds, profile=True)
            finally:
                vec.close()
            lines.append(
                f"cProfile of shm parent step ({r['vec_steps']} vec steps; profiler inflates "
                f"times): {r['profiled_us_per_vec_step']:.1f} us per vec step"
            )
            lines.append(r["profile"])
    lines.append(f"after: 2 spinning processes got {free_cores():.2f} cores")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=["light", "heavy"],
                        choices=sorted(SCENARIOS))
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    np.set_printoptions(precision=3)
    for line in measure(args.scenarios, args.num_envs, args.seconds, args.profile):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
