"""Tests of deszoo.aggregates: paired differences, normalised scores, IQM, the stratified
bootstrap, performance profiles, the marl-eval export and the page section."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import deszoo
from deszoo.aggregates import (
    Task,
    bootstrap,
    iqm,
    marl_eval_json,
    newest_versions,
    normalised,
    paired_difference,
    performance_profile,
    plot_profiles,
    render_section,
    tasks_from,
)
from deszoo.cli import main as deszoo_main
from deszoo.scores import entry_path, load, main

ROOT = Path(__file__).resolve().parent.parent
ENTRIES = ROOT / "benchmarks" / "scores"


def _entry(scenario: str, preset: str, policy: str, returns, seed: int = 0,
           curve=None) -> dict:
    """The fields of an entry that the aggregates read."""
    training = None if policy in ("random", "heuristic") else {
        "algorithm": "x", "timesteps": 10, "wall_s": 1.0, "train_seed": seed,
        "curve": curve if curve is not None else [[5, 1.0], [10, None]]}
    return {"scenario": scenario, "preset": preset, "policy": policy,
            "seeds": list(range(len(returns))), "returns": [float(r) for r in returns],
            "mean": float(np.mean(returns)), "training": training}


def test_paired_difference_removes_the_noise_both_sides_share():
    """Returns that move together seed by seed: the paired interval is narrow and above
    zero where the independent intervals overlap."""
    rng = np.random.default_rng(0)
    common = rng.normal(0, 50, 20)  # the seed's arrivals, shared by both policies
    a, b = common + 5 + rng.normal(0, 1, 20), common + rng.normal(0, 1, 20)
    p = paired_difference(a, b)
    assert p.above_zero and p.lo < 5 < p.hi and p.hi - p.lo < 3
    assert np.mean(a) - 2 * np.std(a) < np.mean(b)  # independent intervals would overlap
    assert not paired_difference(b, a).above_zero
    with pytest.raises(ValueError, match="one value per seed"):
        paired_difference(a, b[:3])


def test_normalised_maps_random_to_0_and_the_heuristic_to_1():
    assert normalised([-100, -50, 0], -100, -50).tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="must score above random"):
        normalised(1.0, 2.0, 2.0)


def test_iqm_is_the_mean_of_the_middle_half():
    assert iqm([1, 2, 3, 4, 5, 6, 7, 8]) == 4.5
    assert iqm([1, 2, 3, 4, 5, 6, 7, 1e9]) == 4.5  # an outlier does not move it
    assert iqm([[8, 1], [2, 7], [3, 6], [4, 5]]) == 4.5  # (runs, tasks): all pairs
    assert iqm([3.0]) == 3.0
    # scipy.stats.trim_mean(x, 0.25) cuts int(0.25 * n) = 2 of 10 at each end
    assert iqm(np.arange(10.0)) == pytest.approx(np.mean(np.arange(2.0, 8.0)))


def test_newest_versions_keeps_the_highest_version_of_each_scenario():
    assert newest_versions(["a_v0", "a_v1", "b_v0", "c_v2", "c_v10"]) == ["a_v1", "b_v0", "c_v10"]
    newest = newest_versions(deszoo.list_envs())
    assert "elevator_v2" in newest and "elevator_v1" not in newest
    assert len(newest) == len({n.rsplit("_v", 1)[0] for n in deszoo.list_envs()})


def test_tasks_from_groups_runs_by_training_seed():
    entries = [_entry("s_v0", "small", "random", [0, 0, 0]),
               _entry("s_v0", "small", "heuristic", [10, 10, 10]),
               _entry("s_v0", "small", "L", [8, 8, 8], seed=2),
               _entry("s_v0", "small", "L", [4, 4, 4], seed=0),
               _entry("s_v0", "default", "L", [1, 1, 1]),  # no baselines: no task
               _entry("t_v0", "small", "random", [0, 0, 0])]
    (task,) = tasks_from(entries)
    assert task.name == "s_v0/small" and task.train_seeds["L"] == [0, 2]
    np.testing.assert_allclose(task.scores("L"), [0.4, 0.8])
    assert tasks_from(entries, scenarios=["t_v0"]) == []
    entries[2]["seeds"] = [7, 8, 9]
    with pytest.raises(ValueError, match="other seeds"):
        tasks_from(entries)


def _tasks(noise: float, runs: int = 1, n_tasks: int = 6) -> list[Task]:
    rng = np.random.default_rng(1)
    tasks = []
    for i in range(n_tasks):
        base = rng.normal(0, 10, 20)
        learner = np.stack([base + 0.6 * 10 + rng.normal(0, noise, 20) for _ in range(runs)])
        tasks.append(Task(f"s{i}_v0", "small", base, base + 10, {"L": learner}))
    return tasks


def test_bootstrap_interval_holds_the_point_and_grows_with_the_noise():
    point, lo, hi = bootstrap(_tasks(1.0), "L")
    assert lo <= point <= hi and point == pytest.approx(0.6, abs=0.05)
    wide = bootstrap(_tasks(8.0), "L")
    assert wide[2] - wide[1] > hi - lo
    assert bootstrap(_tasks(8.0), "L") == wide  # seeded: the page does not drift
    # runs only (rliable's stratified bootstrap): one run per task leaves nothing to resample
    _, lo1, hi1 = bootstrap(_tasks(1.0), "L", episodes=False)
    assert lo1 == hi1
    _, lo3, hi3 = bootstrap(_tasks(3.0, runs=3), "L", episodes=False)
    assert hi3 > lo3
    with pytest.raises(ValueError, match="no task has runs"):
        bootstrap(_tasks(1.0), "M")


def test_performance_profile_falls_from_1_to_0():
    taus = np.linspace(-1, 2, 31)
    point, lo, hi = bootstrap(_tasks(2.0, runs=2), "L", performance_profile(taus))
    assert point[0] == 1.0 and point[-1] == 0.0
    assert np.all(np.diff(point) <= 0)
    assert np.all(lo <= point + 1e-12) and np.all(point <= hi + 1e-12)


def test_plot_profiles_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = plot_profiles(_tasks(2.0), ["L"], tmp_path / "p.png", reps=50)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_marl_eval_layout():
    """environment -> task -> algorithm -> seed_S -> step_i ..., absolute_metrics last (what
    marl-eval's JsonLogger writes and data_process_pipeline reads); one step per run unless
    the curves are asked for."""
    entries = [_entry("s_v0", "small", "random", [1, 2]),
               _entry("s_v0", "small", "L", [3, 4], seed=1,
                      curve=[[5, 2.0], [8, None], [10, 3.5]])]
    task = marl_eval_json(entries)["deszoo"]["s_v0-small"]
    run = task["L"]["seed_1"]
    assert list(run) == ["step_0", "absolute_metrics"]
    assert run["step_0"] == {"step_count": 10, "return": [3.0, 4.0]}
    assert run["absolute_metrics"] == {"return": [3.0, 4.0]}
    assert task["random"]["seed_0"]["step_0"] == {"step_count": 0, "return": [1.0, 2.0]}
    data = marl_eval_json(entries, curves=True)
    run = data["deszoo"]["s_v0-small"]["L"]["seed_1"]
    assert list(run) == ["step_0", "step_1", "absolute_metrics"]  # the null point left out
    assert run["step_1"] == {"step_count": 10, "return": [3.5]}
    json.dumps(data)  # plain JSON


def test_render_section_says_where_a_learner_fails_and_what_one_learned():
    entries = [_entry("s_v0", "small", "random", [0, 1, 0, 1]),
               _entry("s_v0", "small", "heuristic", [10, 11, 10, 11]),
               _entry("s_v0", "small", "Good", [9, 10, 9, 10]),
               _entry("s_v0", "small", "Rule", [9, 10, 9, 10]),
               _entry("s_v0", "small", "Weak", [3, 4, 3, 4])]
    notes = {("s_v0", "small", "Weak"): "loops", ("s_v0", "small", "Rule"): "a one-line rule"}
    text = "\n".join(render_section(entries, ["s_v0"], notes))
    good = next(line for line in text.splitlines() if "| Good |" in line)
    rule = next(line for line in text.splitlines() if "| Rule |" in line)
    weak = next(line for line in text.splitlines() if "| Weak |" in line)
    assert good.endswith("| passes |") and "0.90" in good
    assert rule.endswith("| passes: a one-line rule |")  # a passing learner's note is shown too
    assert "below half the random-to-heuristic gap" in weak and weak.endswith(": loops |")
    assert "| Weak | 1 | 1 |" in text  # its IQM row: 1 task, 1 run


def test_entry_path_names_the_training_seed():
    e = _entry("s_v0", "small", "MAPPO-loop", [1, 2], seed=2)
    assert entry_path(e, "d").name == "s_v0-small-MAPPO-loop-seed2.json"
    e["training"]["train_seed"] = 0
    assert entry_path(e, "d").name == "s_v0-small-MAPPO-loop.json"


def test_every_registered_scenario_has_baselines_and_a_learner():
    """Issue 33: random, heuristic and a learned entry for every name in list_envs(), on
    the small and default presets."""
    entries, _ = load(ENTRIES)
    have: dict[tuple[str, str], set[str]] = {}
    for e in entries:
        have.setdefault((e.data["scenario"], e.data["preset"]), set()).add(e.data["policy"])
    missing = []
    for name in deszoo.list_envs():
        for preset in ("small", "default"):
            policies = have.get((name, preset), set())
            if not {"random", "heuristic"} <= policies or not policies - {"random", "heuristic"}:
                missing.append(f"{name}/{preset}: {sorted(policies)}")
    assert missing == []


def test_marl_eval_export_from_the_command(tmp_path):
    out = tmp_path / "raw.json"
    assert main(["--marl-eval", str(out), "--dir", str(ENTRIES)]) == 0
    data = json.loads(out.read_text())["deszoo"]
    assert "absolute_metrics" in data["jobshop_v0-small"]["random"]["seed_0"]


def test_summary_command_prints_the_aggregates_of_a_folder(tmp_path, capsys):
    """``deszoo scores --summary DIR`` on a user's folder: the learner's row and its IQM;
    without the baselines, an error that says what to add."""
    import shutil

    for policy in ("random", "heuristic", "MaskablePPO"):
        shutil.copy(ENTRIES / f"traffic_v1-small-{policy}.json", tmp_path)
    assert deszoo_main(["scores", "--summary", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| `traffic_v1` small | MaskablePPO | 1 | 0.9" in out and "| passes |" in out
    assert "| MaskablePPO | 1 | 1 |" in out and "![" not in out
    (tmp_path / "traffic_v1-small-random.json").unlink()
    assert deszoo_main(["scores", "--summary", str(tmp_path)]) == 2
    assert "has both a random and a heuristic entry" in capsys.readouterr().err
