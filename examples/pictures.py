"""Draw the pictures of docs/pictures.md: one frame and one episode chart per scenario, each
at its current version (``deszoo.registry.latest_versions()``).

A frame is ``env.render()`` of an env built with ``render_mode="rgb_array"`` (a uint8
array), saved here with matplotlib; an episode chart is ``deszoo.plots.plot_episode``.

    python examples/pictures.py --out docs/img
    python examples/pictures.py --out /tmp/pics --only jobshop_v0

Needs matplotlib (``pip install 'deszoo[render]'``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import deszoo
from deszoo.plots import plot_episode
from deszoo.registry import latest_versions

# scenario: (preset of the frame, heuristic steps before the frame, preset of the chart)
PICTURES = {
    "elevator": ("default", 300, "default"),
    "jobshop": ("default", 150, "default"),
    "loadbalance": ("default", 420, "small"),
    "ridehail": ("default", 150, "default"),
    "supplychain": ("default", 40, "small"),
    "traffic": ("default", 120, "small"),
    "warehouse": ("default", 30, "small"),
}


def save_frame(name: str, preset: str, steps: int, path: Path, seed: int = 0) -> float:
    """Play ``steps`` heuristic steps, save the frame as ``path``; return seconds per frame."""
    import matplotlib.image

    module = deszoo.env_module(name)
    env = module.parallel_env(preset=preset, render_mode="rgb_array")
    obs, infos = env.reset(seed=seed)
    for k in range(steps):
        if not env.agents:
            break
        actions = {a: module.heuristic(obs[a], infos[a]["action_mask"]) for a in env.agents}
        obs, _, _, _, infos = env.step(actions)
        if k >= steps - 40:  # frames of consecutive steps: jobshop's Gantt strip needs them
            env.render()
    start = time.perf_counter()
    frame = env.render()
    took = time.perf_counter() - start
    assert isinstance(frame, np.ndarray)
    matplotlib.image.imsave(path, frame)
    env.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    parser.add_argument("--only", nargs="*", default=None, help="scenario names")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    current = {name.rsplit("_", 1)[0]: name for name in latest_versions()}
    for short, (frame_preset, steps, chart_preset) in PICTURES.items():
        name = current[short]
        if args.only and name not in args.only:
            continue
        took = save_frame(name, frame_preset, steps, args.out / f"{short}_frame.png")
        plot_episode(name, args.out / f"{short}_episode.png", preset=chart_preset)
        print(f"{name}: frame {took * 1000:.0f} ms")  # noqa: T201 - a script's output


if __name__ == "__main__":
    main()
