"""Why round-robin trails the serial loop on the large presets: stepping envs in turn.

The serial loop of ``deszoo bench`` runs each env alone for all of its steps; a vector env
steps every env once per ``step``. This script separates the two costs that could make
round-robin slower: the backend's own work, and taking the envs in turn. Three ways to do
the same work (the same actions per env, autoresets counted as steps), CPU per env step::

    serial       env 0 for all its steps, then env 1, ...   (no deszoo.vector)
    interleaved  step 0 of every env, then step 1, ...      (no deszoo.vector)
    roundrobin   make_vec(backend="roundrobin", copy=False)  (interleaved, with the backend)

Interleaved against serial is what taking the envs in turn costs (one env's heap is hot
in the caches when it runs alone; in turn, each step finds it evicted by the others');
roundrobin against interleaved is what the backend adds. All three run under the GC
threshold the backends set (``deszoo.vector._host.GC_YOUNG``). Modes alternate, best of
``--repeats``::

    python benchmarks/interleave.py                               # traffic_v0/large
    python benchmarks/interleave.py --work ridehail_v0/large --envs 1,2,4,8
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np

from deszoo.registry import make
from deszoo.vector import make_vec
from deszoo.vector._host import GC_YOUNG

MODES = ("serial", "interleaved", "roundrobin")


def plan(name: str, preset: str, envs: int, steps: int) -> list[list[np.ndarray]]:
    """Per env, ``steps`` rows of priorities (a seeded uniform per agent and action)."""
    env = make(name, preset=preset)
    shape = env.mask_buf.shape
    env.close()
    return [[np.random.default_rng([i, t]).random(shape, dtype=np.float32)
             for t in range(steps)] for i in range(envs)]


def _act(prio: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return (prio * mask).argmax(axis=1)  # the legal action of highest priority


def run_plain(name: str, preset: str, prios: list, interleave: bool) -> float:
    """CPU seconds of the env steps, each env its own ``make``; seeds 0..envs-1."""
    envs = [make(name, preset=preset) for _ in prios]
    for i, env in enumerate(envs):
        env.reset_arrays(i)
    steps = len(prios[0])
    order = ([(t, i) for t in range(steps) for i in range(len(envs))] if interleave
             else [(t, i) for i in range(len(envs)) for t in range(steps)])
    cpu = time.process_time
    total = 0.0
    for t, i in order:
        env = envs[i]
        if env.episode_over:  # next-step autoreset, as the vector envs do: a step
            c = cpu()
            env.reset_arrays(None)
            total += cpu() - c
            continue
        act = _act(prios[i][t], env.mask_buf)
        c = cpu()
        env.step_arrays(act)
        total += cpu() - c
    for env in envs:
        env.close()
    return total


def run_roundrobin(name: str, preset: str, prios: list) -> float:
    n = len(prios)
    vec = make_vec(name, n, backend="roundrobin", seed=0, preset=preset, copy=False)
    _, infos = vec.reset(seed=0)
    mask = infos["action_mask"]
    rows = mask.shape[0] // n
    cpu = time.process_time
    total = 0.0
    for t in range(len(prios[0])):
        act = np.concatenate([_act(prios[i][t], mask[i * rows:(i + 1) * rows])
                              for i in range(n)])
        c = cpu()
        out = vec.step(act)
        total += cpu() - c
        mask = out[4]["action_mask"]
    vec.close()
    return total


def measure(work: str, envs: list[int], steps: int, repeats: int) -> list[dict]:
    """Best CPU microseconds per env step of each mode, per number of envs."""
    name, preset = work.split("/")
    saved = gc.get_threshold()
    gc.set_threshold(max(GC_YOUNG, saved[0]), *saved[1:])
    rows = []
    try:
        for n in envs:
            per_env = max(1, steps // n)
            prios = plan(name, preset, n, per_env)
            best = dict.fromkeys(MODES, float("inf"))
            for _ in range(repeats):
                for mode in MODES:
                    if mode == "roundrobin":
                        s = run_roundrobin(name, preset, prios)
                    else:
                        s = run_plain(name, preset, prios, mode == "interleaved")
                    best[mode] = min(best[mode], s / (n * per_env) * 1e6)
            rows.append({"envs": n, "steps_per_env": per_env, **best})
    finally:
        gc.set_threshold(*saved)
    return rows


def table(work: str, rows: list[dict]) -> str:
    lines = [f"{work}: CPU us per env step, best of the repeats",
             "| envs | steps per env | serial | interleaved | roundrobin | interleaved / "
             "serial | roundrobin / interleaved | roundrobin / serial |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        s, i, b = r["serial"], r["interleaved"], r["roundrobin"]
        lines.append(f"| {r['envs']} | {r['steps_per_env']} | {s:.1f} | {i:.1f} | {b:.1f} | "
                     f"{i / s:.2f}x | {b / i:.2f}x | {b / s:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="traffic_v0/large", help="SCENARIO/PRESET")
    ap.add_argument("--envs", default="1,2,4,8", help="numbers of envs, comma-separated")
    ap.add_argument("--steps", type=int, default=1600,
                    help="env steps per mode and row, split over the envs")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    rows = measure(a.work, [int(x) for x in a.envs.split(",")], a.steps, a.repeats)
    print(table(a.work, rows))


if __name__ == "__main__":
    main()
