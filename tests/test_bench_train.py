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
        ("ppo-loop-pipelined", "shm", 2),
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
                                            "ppo-loop", "ppo-loop-pipelined"]
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
