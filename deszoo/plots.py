"""Episode charts: play one episode and draw what happened, one chart per scenario.

``plot_episode("jobshop_v0", "jobshop.png")`` plays an episode with the scenario's
heuristic (or the uniformly random legal policy), records the model's state after every
step (so a chart shows the state at the decision points, not between them) and saves a
chart that suits the scenario: a Gantt chart of the job shop; queue lengths and waits
over simulated time for the queueing scenarios (loadbalance, elevator, traffic,
warehouse); inventory, backlog and orders per node for the supply chain; open requests,
drivers by state and earnings for ride hailing. See ``docs/pictures.md``.

Each scenario's drawing code lives in ``deszoo/envs/<name>/render.py``: a ``Trace`` class
with ``record(env)`` (called after ``reset`` and after every step; it only reads the
env's state) and ``chart(figure, env) -> str`` (draws the chart, returns a one-line
summary for the title). Needs matplotlib: ``pip install 'deszoo[render]'``.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType

import numpy as np

from deszoo.core.canvas import Canvas, require_matplotlib
from deszoo.errors import ConfigError
from deszoo.registry import env_module

__all__ = ["CHART_SIZE", "POLICIES", "plot_episode", "render_module"]

CHART_SIZE = (1200, 750)  # pixels
POLICIES = ("heuristic", "random")


def render_module(name: str) -> ModuleType:
    """The drawing module (``deszoo/envs/<name>/render.py``) of scenario ``name``."""
    package = env_module(name).parallel_env.__module__.rsplit(".", 1)[0]
    return importlib.import_module(f"{package}.render")


def plot_episode(
    name: str,
    path: str | os.PathLike,
    preset: str = "small",
    seed: int = 0,
    policy: str = "heuristic",
) -> Path:
    """Play one episode of scenario ``name`` and save a chart of it as ``path`` (PNG).

    Args:
        name: registered scenario, e.g. ``"jobshop_v0"``.
        path: file to write; its suffix picks the format (``.png``).
        preset: the scenario's preset.
        seed: seeds the episode (and the random policy).
        policy: ``"heuristic"`` (the scenario's ``heuristic(obs, mask)``) or ``"random"``
            (a uniformly random legal action from each agent's mask).

    Returns:
        The path written.
    """
    if policy not in POLICIES:
        raise ConfigError(f"policy={policy!r}; valid: {', '.join(map(repr, POLICIES))}")
    require_matplotlib()
    module = env_module(name)
    render = render_module(name)
    env = module.parallel_env(preset=preset)
    rng = np.random.default_rng(seed)
    trace = render.Trace()
    obs, infos = env.reset(seed=seed)
    trace.record(env)
    while env.agents:
        actions = {}
        for agent in env.agents:
            mask = infos[agent]["action_mask"]
            if policy == "heuristic":
                actions[agent] = module.heuristic(obs[agent], mask)
            else:
                actions[agent] = int(rng.choice(np.flatnonzero(mask)))
        obs, _, _, _, infos = env.step(actions)
        trace.record(env)
    canvas = Canvas(CHART_SIZE, layout="constrained")
    with canvas.style():
        summary = trace.chart(canvas.figure, env)
        canvas.figure.suptitle(
            f"{name}   preset {preset}, seed {seed}, {policy} policy, {env.num_steps} steps "
            f"(lines: the state after every step)\n{summary}",
            x=0.01, ha="left", fontsize=11,
        )  # fmt: skip
    path = Path(path)
    canvas.save(path)
    env.close()
    return path
