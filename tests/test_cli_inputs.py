"""The command line at the edge of its inputs (issue 37, item 4): a policy that is not one, a
plot file that exists, more seeds than a score runs."""

from __future__ import annotations

import sys
import textwrap

import pytest

from deszoo.cli import MAX_SCORE_SEEDS, main


@pytest.fixture
def policies(tmp_path, monkeypatch):
    """A module ``user_policies`` in the current folder with broken policies."""
    (tmp_path / "user_policies.py").write_text(textwrap.dedent("""
        import numpy as np

        def raises(obs, mask):
            return 1 / 0

        def two_per_row(obs, mask):
            return np.zeros((len(obs), 2), dtype=int)

        def out_of_range(obs, mask):
            return np.full(len(obs), 99)
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("user_policies", None)


def test_a_callable_that_takes_no_obs_and_mask_is_refused_by_name(policies, capsys):
    assert main(["scores", "os:getcwd", "jobshop_v0", "--preset", "small", "--seeds", "2"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and err.count("\n") == 1
    assert "argument POLICY: os:getcwd cannot be called as policy(obs, mask)" in err


@pytest.mark.parametrize(("attr", "words"), [
    ("raises", "user_policies:raises raised ZeroDivisionError: division by zero"),
    ("two_per_row", "gave an invalid action: actions must have shape (6,) (one action per "
                    "row: 2 envs x 3 agents), got shape (6, 2)"),
    ("out_of_range", "user_policies:out_of_range gave an invalid action: row 0"),
])
def test_a_policy_that_fails_while_scoring_is_named_in_one_last_line(policies, capsys, attr,
                                                                     words):
    argv = ["scores", f"user_policies:{attr}", "jobshop_v0", "--preset", "small", "--seeds", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("deszoo: error: argument POLICY: ")
    assert words in err.splitlines()[-1]
    if attr == "raises":  # the policy's own frames, for the user to find the line
        assert 'user_policies.py", line' in err and "deszoo/policies.py" not in err
    assert not list(policies.glob("*.json"))  # no entry written


@pytest.mark.parametrize("seeds", [MAX_SCORE_SEEDS + 1, 99999999999])
def test_more_seeds_than_a_score_runs_are_refused(seeds, capsys):
    assert main(["scores", "random", "jobshop_v0", "--seeds", str(seeds)]) == 2
    err = capsys.readouterr().err
    assert f"argument --seeds: {seeds} is more than {MAX_SCORE_SEEDS:,}" in err


def test_run_plot_replaces_a_file_only_with_force(tmp_path, capsys):
    png = tmp_path / "episode.png"
    png.write_bytes(b"mine")
    assert main(["run", "loadbalance_v0", "--preset", "small", "--plot", str(png)]) == 2
    assert f"argument --plot: {str(png)!r} exists; pass --force" in capsys.readouterr().err
    assert png.read_bytes() == b"mine"
    assert main(["run", "loadbalance_v0", "--preset", "small", "--plot", str(png),
                 "--force"]) == 0
    assert png.stat().st_size > 10_000


@pytest.mark.parametrize("extra", [[], ["--train"], ["--autotune", "jobshop_v0"]])
def test_bench_seed_that_leaves_an_env_no_seed_is_a_usage_error(extra, capsys):
    # env i of a row is seeded seed + i: with 4 envs the last is past 2**32 - 1
    rows = [] if extra[:1] == ["--autotune"] else ["--num-envs", "4"]
    scenarios = [] if extra else ["--scenarios", "jobshop_v0"]
    assert main(["bench", *extra, *scenarios, *rows, "--seed", str(2**32 - 2)]) == 2
    assert "argument --seed: seed=4294967294 is too large for" in capsys.readouterr().err
