"""deszoo bench --train: the learners' rows, their phase shares, the missing-extra message."""

from __future__ import annotations

import json

import pytest

from deszoo.bench import train
from deszoo.cli import main


def test_rows_put_the_chain_first_and_pipeline_only_multiprocess_backends():
    rows = train.train_rows([("jobshop_v0", "small")], list(train.LEARNERS),
                            ["roundrobin", "shm"], [4], [2])
    assert [(r.learner, r.backend, r.num_workers) for r in rows] == [
        ("supersuit-chain", "supersuit", 2),
        ("sb3", "roundrobin", 0), ("sb3", "shm", 2),
        ("ppo-loop", "roundrobin", 0), ("ppo-loop", "shm", 2),
        ("ppo-loop-halves", "shm", 2), ("ppo-loop-pipelined", "shm", 2),
    ]


def test_missing_extra_says_what_to_install_and_exits_2(monkeypatch, capsys):
    """Without torch (or SB3) the mode names the packages and the pip command."""
    real = train.importlib.util.find_spec
    monkeypatch.setattr(train.importlib.util, "find_spec",
                        lambda name, *a: None if name in ("torch", "stable_baselines3")
                        else real(name, *a))
    assert main(["bench", "--train"]) == 2
    err = capsys.readouterr().err
    assert "--train needs torch, stable_baselines3" in err
    assert "pip install torch" in err and "pip install 'deszoo[sb3]'" in err
    assert train.missing_packages(["ppo-loop"]) == ["torch"]


@pytest.mark.parametrize("argv", [
    ["--plot"], ["--wide"], ["--learners", "a2c"], ["--modes", "serial"],
    ["--scenarios", "all"],
])
def test_bad_train_arguments_are_usage_errors(argv, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("stable_baselines3")
    assert main(["bench", "--train", *argv]) == 2
    assert "deszoo: error:" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "why"), [
    (["--num-envs", "2", "--workers", "3", "--learners", "sb3", "--modes", "shm"],
     "every row has more workers than sims (workers [3], sims [2])"),  # blamed the halves
    (["--num-envs", "1", "--learners", "ppo-loop-halves"],
     "the loop's halves run on multiprocess backends only, with at least 2 sims"),
])
def test_train_with_no_row_to_run_says_why(argv, why, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("stable_baselines3")
    assert main(["bench", "--train", "--scenarios", "jobshop_v0/small", *argv]) == 2
    assert f"--train: no row to run ({why})" in capsys.readouterr().err


def test_train_run_measures_every_learner(tmp_path, capsys):
    """A tiny run of every learner: the table, the JSON, phase shares that add up, and
    timesteps rounded up to whole rollouts."""
    pytest.importorskip("torch")
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("supersuit")
    out = tmp_path / "train.json"
    assert main(["bench", "--train", "--scenarios", "jobshop_v0/small", "--num-envs", "2",
                 "--workers", "2", "--steps", "600", "--repeats", "1", "--no-progress",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "deszoo bench --train" in printed and "ppo-loop-pipelined" in printed
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [r["learner"] for r in rows] == ["supersuit-chain", "sb3", "sb3", "ppo-loop",
                                            "ppo-loop", "ppo-loop-halves", "ppo-loop-pipelined"]
    assert "pipelined, jobshop_v0/small 2 sims on shm with 2 workers: " in printed
    assert "x its synchronous form (halves), " in printed and "x the plain loop (sync)" in printed
    for r in rows:
        assert r["error"] is None, r
        # 2 sims x 3 agents = 6 rows, 64 steps a rollout: 600 rounds up to 2 rollouts
        assert r["timesteps"] == 768, r
        assert r["timesteps_per_s"] > 0
        shares = r["shares"]
        assert all(shares[p] > 0 for p in ("env", "inference", "update")), r
        assert sum(shares.values()) == pytest.approx(1.0)
    assert rows[0]["x_chain"] == pytest.approx(1.0)
    assert result["machine"]["load_average_end"] is not None


def test_tune_workers_leave_the_learner_a_core():
    assert train.tune_workers(8, 32) == [1, 7, 8]
    assert train.tune_workers(2, 8) == [1, 2]
    assert train.tune_workers(1, 8) == [1]
    assert train.tune_workers(8, 4) == [1, 4]  # at most one worker per simulation


def _result(rows, cores=2):
    base = {"scenario": "jobshop_v0", "preset": "default", "learner": "ppo-loop",
            "num_sims": 8, "error": None, "spin_us": None}
    return {"machine": {"usable_cores": cores},
            "rows": [{**base, **r} for r in rows]}


def test_recommend_names_the_fastest_row_and_its_make_vec_call():
    rec = train.recommend(_result([
        {"backend": "roundrobin", "num_workers": 0, "timesteps_per_s": 1000.0},
        {"backend": "shm", "num_workers": 2, "timesteps_per_s": 900.0},
        {"backend": "shm", "num_workers": 1, "spin_us": 0.0, "timesteps_per_s": 1100.0},
        {"backend": "shm", "num_workers": 2, "timesteps_per_s": 5000.0, "error": "boom"},
        {"backend": "supersuit", "learner": "supersuit-chain", "num_workers": 2,
         "timesteps_per_s": 9000.0},
    ]))
    assert rec["best"]["num_workers"] == 1 and rec["best"]["spin_us"] == 0.0
    assert rec["x_roundrobin"] == pytest.approx(1.1)
    assert rec["leaves_core"]
    assert rec["snippet"] == ("deszoo.vector.make_vec('jobshop_v0', num_sims=8, "
                              "backend='shm', num_workers=1, spin_us=0, "
                              "env_kwargs={'preset': 'default'})")
    lines = train.recommendation_lines(rec)
    assert lines[0] == ("fastest for ppo-loop: 8 sims on shm with 1 worker, spin_us=0: "
                        "1,100 timesteps/s (1.10x roundrobin)")
    assert "leaves the learner a core" in lines[1]
    assert train.recommend(_result([{"backend": "shm", "num_workers": 2, "error": "x"}])) is None
    assert train.recommendation_lines(None) == ["no learner ran; nothing to recommend"]


@pytest.mark.parametrize("argv", [
    ["--train", "--quick"], ["--train", "--standard"],
    ["--train", "--autotune", "jobshop_v0", "--scenarios", "traffic_v1"],
])
def test_train_combinations_that_make_no_sense_are_usage_errors(argv, capsys):
    assert main(["bench", *argv]) == 2
    assert "deszoo: error:" in capsys.readouterr().err


def test_train_autotune_sweeps_workers_and_spin_and_recommends(tmp_path, capsys):
    """--train --autotune ENV: the PPO loop on roundrobin and on shm with 1 and all
    workers, spinning and not, then the fastest with its make_vec call."""
    pytest.importorskip("torch")
    out = tmp_path / "tune.json"
    assert main(["bench", "--train", "--autotune", "jobshop_v0", "--presets", "small",
                 "--num-envs", "2", "--workers", "1,2", "--steps", "300", "--repeats", "1",
                 "--no-progress", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert sorted((r["backend"], r["num_workers"], str(r["spin_us"])) for r in rows) == [
        ("roundrobin", 0, "None"), ("shm", 1, "0.0"), ("shm", 1, "None"), ("shm", 2, "0.0"),
        ("shm", 2, "None")]
    assert {r["learner"] for r in rows} == {"ppo-loop"}
    assert "shm spin 0" in printed
    assert "fastest for ppo-loop: 2 sims on" in printed
    assert "deszoo.vector.make_vec('jobshop_v0', num_sims=2" in printed


def test_pipeline_lines_compare_with_both_synchronous_forms():
    def row(learner, rate, backend="shm", sims=32):
        return {"scenario": "jobshop_v0", "preset": "default", "learner": learner,
                "backend": backend, "num_sims": sims, "num_workers": 2, "spin_us": None,
                "timesteps_per_s": rate, "error": None}

    result = {"rows": [row("supersuit-chain", 10.0, "supersuit"), row("ppo-loop", 50.0),
                       row("ppo-loop-halves", 40.0), row("ppo-loop-pipelined", 54.0),
                       row("ppo-loop-pipelined", 9.0, sims=8)]}
    assert train.pipeline_lines(result) == [
        "pipelined, jobshop_v0/default 32 sims on shm with 2 workers: 1.35x its synchronous "
        "form (halves), 1.08x the plain loop (sync)"]
    result["rows"].append({**row("ppo-loop-halves", 0.0, sims=8), "error": "boom"})
    assert len(train.pipeline_lines(result)) == 1  # a failed row compares with nothing


def test_train_rows_with_more_workers_than_sims_are_left_out_with_a_warning(caplog):
    pytest.importorskip("torch")
    pytest.importorskip("stable_baselines3")
    from deszoo.bench.cli import check_bench
    from deszoo.cli import build_parser

    args = build_parser().parse_args(["bench", "--train", "--scenarios", "jobshop_v0/small",
                                      "--num-envs", "2,4", "--workers", "3",
                                      "--learners", "sb3", "--modes", "shm"])
    with caplog.at_level("WARNING", logger="deszoo.bench"):
        plan = check_bench(args)
    assert [(r.num_sims, r.num_workers) for r in plan.train.rows] == [(4, 3)]
    assert "--train: 1 row(s) left out: more workers than sims" in caplog.text
