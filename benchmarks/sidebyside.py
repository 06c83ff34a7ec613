"""Side-by-side throughput of the vector backends, and where the parent's time goes.

Run ``python benchmarks/sidebyside.py`` (``--help`` for options). It is a measurement,
not a test: the machine is shared and has few cores, so compare ratios within one run.

For each scenario it reports env-steps/s of a plain loop over the envs (no vector env),
``roundrobin``, ``supersuit`` (``num_cpus=2``) and ``shm`` (2 workers), all open at once and
run in alternating short slices; for the vector envs also the parent's own CPU time per env
step, and with ``--profile`` a cProfile breakdown of the ``shm`` parent's ``step``. It also
measures how many cores two spinning processes get before and after, to show how busy the
machine was.
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

import deszoo
from deszoo.bench.machine import free_cores
from deszoo.rollouts import legal_last
from deszoo.vector import make_vec

SCENARIOS = {
    "light": ("jobshop_v0", {}),
    "heavy": ("traffic_v0", {"preset": "large"}),
}


class PlainLoop:
    """The envs stepped directly through the array API: the ceiling of one process."""

    label = "plain loop"

    def __init__(self, name: str, kwargs: dict, num_envs: int):
        self.envs = [deszoo.make(name, **kwargs) for _ in range(num_envs)]
        for i, env in enumerate(self.envs):
            env.reset_arrays(i)
        self.steps = self.events = 0
        self.wall = 0.0

    def run(self, seconds: float) -> None:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for env in self.envs:
                if env.episode_over:
                    env.reset_arrays(None)
                    continue
                before = env.num_events
                env.step_arrays(legal_last(env.mask_buf))
                self.events += env.num_events - before
            self.steps += len(self.envs)
        self.wall += time.perf_counter() - start

    def close(self) -> None:
        pass


class VecRunner:
    """Steps a vector env with a cheap mask-following policy, in resumable slices.

    Times the parent's own CPU (``time.process_time`` around ``step`` only: the policy is
    excluded, and the parent sleeps while the workers run).
    """

    def __init__(self, label: str, vec: Any, warmup: int = 20):
        self.label, self.vec = label, vec
        _, self.infos = vec.reset(seed=0)
        for _ in range(warmup):
            *_, self.infos = vec.step(legal_last(self.infos["action_mask"]))
        self.vsteps, self.parent_cpu, self.wall = 0, 0.0, 0.0
        self.profiler: cProfile.Profile | None = None

    def run(self, seconds: float) -> None:
        vec, profiler = self.vec, self.profiler
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            acts = legal_last(self.infos["action_mask"])
            c0 = time.process_time()
            if profiler is not None:
                profiler.enable()
            *_, self.infos = vec.step(acts)
            if profiler is not None:
                profiler.disable()
            self.parent_cpu += time.process_time() - c0
            self.vsteps += 1
        self.wall += time.perf_counter() - start

    @property
    def steps(self) -> int:
        return self.vsteps * self.vec.num_sims

    def close(self) -> None:
        self.vec.close()


def measure(which: list[str], num_envs: int, seconds: float, profile: bool,
            slice_s: float = 0.25) -> list[str]:
    """Every backend of a scenario open at once, run in alternating short slices.

    Alternating slices spread the load of other processes on a shared machine evenly over
    the backends, so their ratios stay meaningful even when absolute rates move.
    """
    lines = [
        f"load average {os.getloadavg()[0]:.2f}; free cores {free_cores(1.0)} (one "
        "spinning process per usable core: their CPU time / wall time)"
    ]
    for key in which:
        name, kwargs = SCENARIOS[key]
        lines.append(
            f"== {key}: {name} {kwargs}, {num_envs} envs, {seconds:g} s per backend in "
            f"{slice_s:g} s slices"
        )
        runners: list[Any] = [PlainLoop(name, kwargs, num_envs)]
        try:
            for label, opts in (
                ("roundrobin", dict(backend="roundrobin")),
                ("supersuit(2 cpu)", dict(backend="supersuit", num_workers=2)),
                ("shm(2 workers)", dict(backend="shm", num_workers=2)),
            ):
                runners.append(VecRunner(label, make_vec(name, num_envs, **opts, **kwargs)))
            for _ in range(max(1, round(seconds / slice_s))):
                for r in runners:
                    r.run(slice_s)
            rates = {}
            for r in runners:
                rates[r.label] = rate = r.steps / r.wall
                extra = ""
                if isinstance(r, VecRunner):
                    extra = f", parent {1e6 * r.parent_cpu / r.steps:6.1f} us CPU per env step"
                else:
                    extra = f" ({r.events / max(r.steps, 1):.0f} SimPy events per env step)"
                lines.append(f"{r.label:17s} {rate:10.0f} env-steps/s{extra}")
            rr, ss, shm = rates["roundrobin"], rates["supersuit(2 cpu)"], rates["shm(2 workers)"]
            lines.append(
                f"ratios: shm/supersuit {shm / ss:.2f}x, shm/roundrobin {shm / rr:.2f}x, "
                f"supersuit/roundrobin {ss / rr:.2f}x"
            )
            if profile:
                shm_runner = runners[-1]
                shm_runner.profiler = cProfile.Profile()
                before = shm_runner.vsteps
                shm_runner.run(min(seconds, 3.0))
                n = shm_runner.vsteps - before
                buf = io.StringIO()
                stats = pstats.Stats(shm_runner.profiler, stream=buf)
                stats.sort_stats("tottime").print_stats(14)
                lines.append(
                    f"cProfile of the shm parent's step ({n} vec steps, wall-clock per call; "
                    f"poll is the sleep while workers run): "
                    f"{1e6 * stats.total_tt / n:.1f} us per vec step"
                )
                lines.append(buf.getvalue())
        finally:
            for r in runners:
                r.close()
    lines.append(f"after: free cores {free_cores(1.0)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=["light", "heavy"],
                        choices=sorted(SCENARIOS))
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--slice", type=float, default=0.25, help="seconds per turn")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    for line in measure(args.scenarios, args.num_envs, args.seconds, args.profile, args.slice):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
