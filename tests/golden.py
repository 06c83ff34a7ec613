"""Golden trajectories: a hash of every step of fixed episodes of every scenario.

``python tests/golden.py`` (re)writes ``tests/data/golden.json``; ``test_golden.py`` checks
that the scenarios still produce exactly these trajectories. A change that alters them
must bump the scenario's version (``jobshop_v1``) with a Version History line, and then
the file is regenerated for the new version.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

import deszoo

PATH = Path(__file__).parent / "data" / "golden.json"
# (preset, seed, policy, steps): small and default episodes in full (up to the step cap),
# large for a few steps; "noop" (the no-op where allowed, else the lowest legal action) is a
# policy built to loop, so its run records how (and whether) a version's episode is truncated.
RUNS = [
    ("small", 0, "random", 400),
    ("small", 1, "heuristic", 400),
    ("default", 2, "random", 300),
    ("default", 3, "heuristic", 300),
    ("large", 4, "heuristic", 15),
    ("small", 5, "noop", 3000),
]


def trajectory_hash(name: str, preset: str, seed: int, policy: str, steps: int) -> str:
    """SHA-256 over every step's arrays (observations, masks, rewards, flags, clock)."""
    env = deszoo.make(name, preset=preset)
    heuristic = deszoo.env_module(name).heuristic
    rng = np.random.default_rng(seed + 100)
    h = hashlib.sha256()
    env.reset_arrays(seed)

    def absorb():
        for a in (env.obs_buf, env.mask_buf, env.rew_buf, env.term_buf, env.trunc_buf,
                  env.live, env.needs_buf):
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(np.float64(env.now).tobytes())

    absorb()
    for _ in range(steps):
        if env.episode_over:
            break
        mask = env.mask_buf
        if policy == "random":
            acts = (rng.random(mask.shape) * mask).argmax(axis=1).astype(np.int64)
        elif policy == "noop":
            acts = np.where(mask[:, 0] > 0, 0, mask.argmax(axis=1)).astype(np.int64)
        else:
            acts = np.array([heuristic(o, m) for o, m in zip(env.obs_buf, mask, strict=True)],
                            dtype=np.int64)
        env.step_arrays(acts)
        absorb()
    return h.hexdigest()


def compute() -> dict:
    return {
        name: {f"{p}/{s}/{pol}/{n}": trajectory_hash(name, p, s, pol, n) for p, s, pol, n in RUNS}
        for name in deszoo.list_envs()
    }


if __name__ == "__main__":
    data = compute()
    PATH.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {PATH}", file=sys.stderr)
