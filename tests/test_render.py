"""Pictures: ``render_mode="rgb_array"`` frames of every scenario and ``deszoo.plots`` charts."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from pettingzoo.test import render_test

import deszoo
from deszoo.core.canvas import FRAME_SIZE, kept_canvas
from deszoo.errors import ConfigError
from deszoo.plots import plot_episode

ENVS = deszoo.list_envs()
SHAPE = (FRAME_SIZE[1], FRAME_SIZE[0], 3)
HEADER = 45  # pixel rows of the title line (time and step: they change every step)
DOCS = Path(__file__).resolve().parents[1] / "docs" / "pictures.md"


def frame_env(name: str):
    return deszoo.make(name, preset="small", render_mode="rgb_array")


def heuristic_step(env, obs, infos, module):
    actions = {a: module.heuristic(obs[a], infos[a]["action_mask"]) for a in env.agents}
    return env.step(actions)


@pytest.mark.parametrize("name", ENVS)
def test_pettingzoo_render_test(name):
    """PettingZoo's render_test on the AEC env, every mode in the metadata (rgb_array too)."""
    module = deszoo.env_module(name)
    assert "rgb_array" in module.parallel_env.metadata["render_modes"]
    assert module.parallel_env.metadata["render_fps"] > 0
    render_test(lambda render_mode: module.env(preset="small", render_mode=render_mode))


@pytest.mark.parametrize("name", ENVS)
def test_frames_have_one_shape_and_follow_the_state(name):
    """uint8 (H, W, 3) frames of one shape; a frame changes with the state and only with it."""
    module = deszoo.env_module(name)
    env = frame_env(name)
    obs, infos = env.reset(seed=0)
    first = env.render()
    assert isinstance(first, np.ndarray) and first.dtype == np.uint8 and first.shape == SHAPE
    frames = [first]
    for _ in range(6):
        if not env.agents:
            break
        obs, _, _, _, infos = heuristic_step(env, obs, infos, module)
        frames.append(env.render())
    assert len(frames) > 2
    assert all(f.shape == SHAPE and f.dtype == np.uint8 for f in frames)
    # the picture below the title line moved on with the simulation
    assert not np.array_equal(frames[0][HEADER:], frames[-1][HEADER:])
    # the same state draws the same frame: nothing is left over from the last frame
    figure = kept_canvas(env).figure
    artists = len(figure.findobj())
    again = env.render()
    assert np.array_equal(again, frames[-1])
    assert len(figure.findobj()) == artists
    # a new episode gets frames of the same shape
    env.reset(seed=1)
    assert env.render().shape == SHAPE
    env.close()
    assert kept_canvas(env) is None


@pytest.mark.parametrize("name", ["jobshop_v0", "traffic_v0"])
def test_frame_before_reset_and_after_close(name):
    env = frame_env(name)
    blank = env.render()
    assert blank.shape == SHAPE and blank.dtype == np.uint8
    env.reset(seed=0)
    assert env.render().shape == SHAPE
    env.close()
    assert env.render().shape == SHAPE  # the last state; a new figure, dropped by close()
    env.close()


def test_render_modes_other_than_rgb_array_are_unchanged():
    env = deszoo.make("jobshop_v0", preset="small", render_mode="ansi")
    env.reset(seed=0)
    assert isinstance(env.render(), str)
    assert kept_canvas(env) is None
    assert deszoo.make("jobshop_v0", preset="small").render() is None


def test_missing_matplotlib_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    env = frame_env("jobshop_v0")
    env.reset(seed=0)
    with pytest.raises(ImportError, match=r"pip install 'deszoo\[render\]'"):
        env.render()
    with pytest.raises(ImportError, match=r"deszoo\[render\]"):
        plot_episode("jobshop_v0", tmp_path / "x.png")


def test_jobshop_gantt_is_exact():
    """With a record after every step, the Gantt chart holds every operation run, once."""
    from deszoo.envs.jobshop.render import Trace

    module = deszoo.env_module("jobshop_v0")
    env = module.parallel_env(preset="small")
    obs, infos = env.reset(seed=4)
    trace = Trace()
    trace.record(env)
    while env.agents:
        obs, _, _, _, infos = heuristic_step(env, obs, infos, module)
        trace.record(env)
    assert len(trace.ops) == sum(job.next_op for job in env.model.jobs)
    by_machine: dict[int, list] = {}
    for m, _, start, stop in trace.ops.values():
        by_machine.setdefault(m, []).append((start, stop))
    for spans in by_machine.values():
        spans.sort()
        assert all(b[0] >= a[1] - 1e-9 for a, b in zip(spans, spans[1:], strict=False))
    last = {job: stop for (job, _), (_, _, _, stop) in sorted(trace.ops.items())}
    for job in env.model.jobs:
        assert last[job.id] == pytest.approx(job.done_at)


@pytest.mark.parametrize("name", ENVS)
def test_plot_episode_writes_a_png(name, tmp_path):
    path = plot_episode(name, tmp_path / f"{name}.png", preset="small", seed=0)
    assert path == tmp_path / f"{name}.png"
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_plot_episode_random_policy_and_bad_input(tmp_path):
    path = plot_episode("supplychain_v0", str(tmp_path / "sc.png"), policy="random", seed=3)
    assert path.stat().st_size > 10_000
    with pytest.raises(ConfigError, match="policy='greedy'"):
        plot_episode("supplychain_v0", tmp_path / "x.png", policy="greedy")
    with pytest.raises(ConfigError, match="unknown scenario"):
        plot_episode("nope_v0", tmp_path / "x.png")


def test_video_recording_is_documented():
    """Gymnasium's RecordVideo does not apply (PettingZoo envs); what SB3's VecVideoRecorder
    needs is written down in docs/pictures.md."""
    text = DOCS.read_text()
    assert "RecordVideo" in text
    for need in ("VecVideoRecorder", 'render_mode == "rgb_array"', "get_images", "render_fps",
                 "moviepy"):  # fmt: skip
        assert need in text, need


def test_sb3_video_recorder_requirements():
    """With sims built for rgb_array, the SB3 adapter meets what VecVideoRecorder asserts
    and reads: its render mode, and one frame per row from get_images."""
    pytest.importorskip("stable_baselines3")
    from deszoo.vector import make_vec, to_sb3

    vec = make_vec("jobshop_v0", 2, backend="roundrobin", preset="small",
                   autoreset_mode="SameStep", render_mode="rgb_array")  # fmt: skip
    venv = to_sb3(vec)
    try:
        assert venv.render_mode == "rgb_array"
        venv.reset()
        images = venv.get_images()
        assert len(images) == venv.num_envs
        assert all(isinstance(i, np.ndarray) and i.shape == SHAPE for i in images)
        assert isinstance(venv.render(), np.ndarray)
    finally:
        venv.close()


@pytest.mark.filterwarnings("ignore::deszoo.errors.MasksIgnoredWarning")
@pytest.mark.parametrize(("n_cars", "lanes"), [(3, 3), (12, 1)])
def test_elevator_chart_gives_each_car_its_own_lane(n_cars, lanes):
    """Up to 8 cars: one strip per car holding that car's floors (four lines in one panel
    hid each other); more: one heat row per car."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from deszoo.envs.elevator.render import Trace

    env = deszoo.make("elevator_v0", n_cars=n_cars, n_floors=10, horizon=200.0)
    env.reset(seed=0)
    trace, floors = Trace(), []
    trace.record(env)
    floors.append([car.floor for car in env.model.cars])
    while env.agents:
        env.step({a: 0 for a in env.agents})
        trace.record(env)
        floors.append([car.floor for car in env.model.cars])
    fig = plt.figure(layout="constrained")
    trace.chart(fig, env)
    axes = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(axes) == lanes + 2
    floors = np.asarray(floors, dtype=float)
    if lanes == n_cars:
        for c, ax in enumerate(axes[2:]):  # added after the two panels below them
            (line,) = ax.get_lines()[:1]
            assert np.array_equal(line.get_ydata(), floors[:, c])
    else:
        (mesh,) = axes[2].collections
        assert np.array_equal(np.asarray(mesh.get_array()).reshape(n_cars, -1), floors.T)
    plt.close(fig)
    env.close()


@pytest.mark.parametrize("name", ENVS)
def test_text_before_reset_says_there_is_no_episode(name, capsys):
    """As the rgb_array frame does: no model yet, so no AttributeError from the scenario."""
    text = deszoo.make(name, preset="small", render_mode="ansi").render()
    assert isinstance(text, str) and "reset()" in text
    assert deszoo.make(name, preset="small", render_mode="human").render() is None
    assert capsys.readouterr().out == ""
