"""What the round-robin vector env adds to the env steps it runs, on the minimal model.

The env is ``bridge.py``'s minimal model (one decision and one timeout per agent and step,
a few microseconds), so the vector env's own work is a large share of the step and easy to
see. Three ways to take the same steps, CPU microseconds per env step, best of
``--repeats`` runs of ``--steps`` env steps::

    plain        a loop over the envs calling step_arrays (no deszoo.vector)
    rr_nocopy    make_vec(backend="roundrobin", copy=False): results are views of the batch
    rr           make_vec(backend="roundrobin"): results are fresh copies (the default)

``adds`` is what a vector step costs beyond the same env steps in the plain loop: the
action check, the hand-out, the autoreset bookkeeping and the results (the ``shm``
workers run the same per-env code, ``deszoo.vector._host.EnvGroup``)::

    python benchmarks/vector_cost.py                          # this tree
    python benchmarks/vector_cost.py --rev 464062b --rev .    # two trees, alternating
"""

from __future__ import annotations

import argparse
import functools
import gc
import time
from pathlib import Path

ENVS = (1, 8)
MODES = ("plain", "rr_nocopy", "rr")


def _plain(cls, envs: int, steps: int) -> float:
    import numpy as np

    group = [cls() for _ in range(envs)]
    for i, env in enumerate(group):
        env.reset_arrays(i)
    acts = np.ones(len(group[0].possible_agents), dtype=np.int64)
    t0 = time.process_time()
    for _ in range(steps // envs):
        for env in group:
            env.step_arrays(acts)
    return time.process_time() - t0


def _roundrobin(cls, envs: int, steps: int, copy: bool) -> float:
    import numpy as np

    from deszoo.vector import make_vec

    vec = make_vec(cls, envs, backend="roundrobin", seed=0, copy=copy)
    try:
        vec.reset(seed=0)
        acts = np.ones(vec.num_envs, dtype=np.int64)
        step = vec.step
        t0 = time.process_time()
        for _ in range(steps // envs):
            step(acts)
        return time.process_time() - t0
    finally:
        vec.close()


def measure(steps: int, repeats: int, agents: int = 1) -> dict[str, float]:
    """Best-of-``repeats`` CPU microseconds per env step, keyed ``"<mode>_<envs>"``."""
    from bridge import minimal_env_class

    cls = functools.partial(minimal_env_class(), n_agents=agents)
    saved = gc.get_threshold()
    gc.set_threshold(max(20_000, saved[0]), *saved[1:])  # as while a vector env is open
    out: dict[str, float] = {}
    try:
        for n in ENVS:
            runs: dict[str, list[float]] = {m: [] for m in MODES}
            for _ in range(repeats):  # interleaved, so a burst of load hits all three
                runs["plain"].append(_plain(cls, n, steps))
                runs["rr_nocopy"].append(_roundrobin(cls, n, steps, copy=False))
                runs["rr"].append(_roundrobin(cls, n, steps, copy=True))
            done = steps // n * n
            for mode, seconds in runs.items():
                out[f"{mode}_{n}"] = min(seconds) / done * 1e6
    finally:
        gc.set_threshold(*saved)
    return out


def table(results: dict[str, dict[str, float]]) -> str:
    lines = ["| tree | envs | plain us | rr_nocopy us | rr us | rr_nocopy adds per vector "
             "step | rr adds per vector step |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for rev, r in results.items():
        for n in ENVS:
            p, a, b = r[f"plain_{n}"], r[f"rr_nocopy_{n}"], r[f"rr_{n}"]
            lines.append(f"| {rev} | {n} | {p:.2f} | {a:.2f} | {b:.2f} | "
                         f"{(a - p) * n:.1f} us | {(b - p) * n:.1f} us |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from revisions import add_options, report

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40000, help="env steps per run")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure (best kept)")
    parser.add_argument("--agents", type=int, default=1, help="agents per env")
    add_options(parser)
    args = parser.parse_args(argv)
    passed = ["--steps", str(args.steps), "--repeats", str(args.repeats),
              "--agents", str(args.agents)]
    report(Path(__file__), args, passed,
           lambda: measure(args.steps, args.repeats, args.agents), table)


if __name__ == "__main__":
    main()
