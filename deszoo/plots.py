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

from deszoo.core.canvas import Canvas, require_matplotlib
from deszoo.episodes import POLICIES
from deszoo.errors import ConfigError
from deszoo.registry import env_module

__all__ = ["CHART_SIZE", "POLICIES", "GenericTrace", "plot_episode", "render_module"]

CHART_SIZE = (1200, 750)  # pixels


def render_module(name: str) -> ModuleType:
    """The drawing module (``deszoo/envs/<name>/render.py``) of scenario ``name``."""
    # The class that lives in the scenario's package (an older version subclasses it).
    module = next(c.__module__ for c in env_module(name).parallel_env.__mro__
                  if c.__module__.endswith(".env"))
    return importlib.import_module(f"{module.rsplit('.', 1)[0]}.render")


class GenericTrace:
    """The chart of an env without a drawing module of its own (a user's env): each agent's
    return so far, and when each agent was at a decision point, over simulated time (or env
    steps, for an env without a clock)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.returns: list[dict[str, float]] = []
        self.deciding: list[tuple[float, int]] = []

    def record_step(self, env, rewards: dict, infos: dict) -> None:
        t = float(getattr(env, "now", len(self.times)))
        total = dict(self.returns[-1]) if self.returns else dict.fromkeys(
            env.possible_agents, 0.0)
        for a, r in rewards.items():
            total[a] += float(r)
        self.times.append(t)
        self.returns.append(total)
        for k, a in enumerate(env.possible_agents):
            if (infos.get(a) or {}).get("needs_action", a in infos):
                self.deciding.append((t, k))

    def chart(self, figure, env) -> str:
        agents = list(env.possible_agents)
        top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=(3, 2))
        shown = agents if len(agents) <= 12 else agents[:: max(1, len(agents) // 12)]
        for a in shown:
            top.plot(self.times, [r[a] for r in self.returns], drawstyle="steps-post",
                     label=a)
        top.set_ylabel("return so far")
        top.legend(loc="upper left", fontsize=8, ncols=min(4, len(shown)))
        if self.deciding:
            t, k = zip(*self.deciding, strict=True)
            bottom.scatter(t, k, s=40, marker="|", linewidths=1)
        if len(agents) <= 20:
            bottom.set_yticks(range(len(agents)), agents)
        bottom.set_ylim(-0.5, len(agents) - 0.5)
        bottom.set_ylabel("at a decision point")
        bottom.set_xlabel("simulated time" if hasattr(env, "now") else "env step")
        total = sum(self.returns[-1].values()) if self.returns else 0.0
        return f"{len(agents)} agents, {len(self.deciding)} decisions, total return {total:.2f}"


def plot_episode(
    name: str,
    path: str | os.PathLike,
    preset: str | None = "small",
    seed: int = 0,
    policy: str = "heuristic",
) -> Path:
    """Play one episode and save a chart of it as ``path``.

    Args:
        name: a registered scenario (``"jobshop_v0"``: its own chart) or a user's env as
            ``"MODULE:ATTR"`` (a generic chart: returns and decision points over time).
        path: file to write; its suffix picks the format (``.png``).
        preset: the scenario's preset (``None``: the env's default).
        seed: seeds the episode (and the random policy).
        policy: ``"heuristic"`` (the module's ``heuristic(obs, mask)``) or ``"random"``
            (a uniformly random legal action from each agent's mask).

    Returns:
        The path written.
    """
    from deszoo.episodes import play, target

    if policy not in POLICIES:
        raise ConfigError(f"policy={policy!r}; valid: {', '.join(map(repr, POLICIES))}")
    require_matplotlib()
    what = target(name, preset)
    if what.scenario is not None:
        trace = render_module(name).Trace()
        record = lambda env, rewards, infos: trace.record(env)  # noqa: E731
    else:
        trace = GenericTrace()
        record = trace.record_step
    env, figures = play(what, seed, policy, on_step=record)
    canvas = Canvas(CHART_SIZE, layout="constrained")
    shown = f"preset {preset}, " if preset is not None else ""
    with canvas.style():
        summary = trace.chart(canvas.figure, env)
        canvas.figure.suptitle(
            f"{name}   {shown}seed {seed}, {policy} policy, {figures['steps']} steps "
            f"(lines: the state after every step)\n{summary}",
            x=0.01, ha="left", fontsize=11,
        )  # fmt: skip
    path = Path(path)
    canvas.save(path)
    env.close()
    return path
