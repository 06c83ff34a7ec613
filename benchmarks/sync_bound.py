"""The best a sync ``step`` can do with W workers, set by how unevenly the envs' steps cost.

Steps ``--envs`` envs of a scenario in this process as ``shm`` workers would (a
mask-following policy), timing each env step's CPU (``time.thread_time_ns``: preemption by
other processes is not counted). Per vector step, ``roundrobin`` costs the sum over the envs
and ``shm`` with W workers (consecutive envs each, as ``make_vec`` splits them) the largest
worker's sum, since a sync step waits for the slowest worker. The ratio of the totals is the
``shm``/``roundrobin`` speed-up a parent costing nothing would reach; it also prints what
``2 * W`` workers on W cores would reach if the OS balanced them perfectly (LPT).

    PYTHONPATH=. python benchmarks/sync_bound.py --envs 32 --workers 2

A measurement, not a test.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def lpt(loads: np.ndarray, cores: int) -> float:
    """Makespan of ``loads`` on ``cores`` by longest-processing-time-first."""
    bins = [0.0] * cores
    for x in sorted(loads, reverse=True):
        bins[bins.index(min(bins))] += x
    return max(bins)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="jobshop_v0")
    p.add_argument("--preset", default=None)
    p.add_argument("--envs", type=int, default=32)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=1500)
    args = p.parse_args(argv)

    import deszoo
    from deszoo.rollouts import legal_last

    kwargs = {"preset": args.preset} if args.preset else {}
    envs = [deszoo.make(args.scenario, **kwargs) for _ in range(args.envs)]
    for i, env in enumerate(envs):
        env.reset_arrays(i)
    cost = np.zeros((args.steps, args.envs))
    clock = time.thread_time_ns
    for t in range(args.steps):
        for i, env in enumerate(envs):
            c0 = clock()
            if env.episode_over:
                env.reset_arrays(None)
            else:
                env.step_arrays(legal_last(env.mask_buf))
            cost[t, i] = clock() - c0
    w = args.workers
    split = np.array_split(np.arange(args.envs), w)
    per_worker = np.stack([cost[:, s].sum(axis=1) for s in split], axis=1)
    total = cost.sum()
    sync = per_worker.max(axis=1).sum()
    split2 = np.array_split(np.arange(args.envs), 2 * w)
    per2 = np.stack([cost[:, s].sum(axis=1) for s in split2], axis=1)
    balanced = sum(lpt(row, w) for row in per2)
    print(f"{args.scenario} {kwargs}, {args.envs} envs, {args.steps} steps: env step "
          f"{cost.mean() / 1e3:.1f} us CPU on average (coefficient of variation "
          f"{cost.std() / cost.mean():.2f})")
    print(f"  best sync shm/roundrobin with {w} workers: {total / sync:.3f}x (the slowest "
          f"worker costs {(per_worker.max(1) / per_worker.mean(1)).mean():.3f}x the mean)")
    print(f"  with {2 * w} workers on {w} cores, perfectly balanced: {total / balanced:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
