"""Tests of the command line (deszoo.cli): errors, exit statuses, help, Ctrl-C, closed pipes.

The benchmark's own output is tested in test_bench.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

import deszoo
from deszoo.cli import EXIT_INTERRUPTED, EXIT_PIPE, main
from deszoo.registry import list_envs

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "deszoo.cli"]


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a command starts any work (an episode, a benchmark, a probe)."""
    import deszoo.bench.autotune
    import deszoo.bench.runner
    import deszoo.cli
    import deszoo.scores

    def started(*args, **kwargs):
        raise AssertionError("work started before the arguments were checked")

    monkeypatch.setattr(deszoo.cli, "run_episode", started)
    monkeypatch.setattr(deszoo.bench.runner, "run_matrix", started)
    monkeypatch.setattr(deszoo.bench.autotune, "calibrate_steps", started)
    monkeypatch.setattr(deszoo.scores, "score", started)


BAD = [
    (["nosuch"], "invalid choice: 'nosuch'"),
    ([], "required: COMMAND"),
    (["run"], "required: NAME"),
    (["run", "nosuch_v0"], "unknown scenario 'nosuch_v0'; registered: elevator_v0,"),
    (["run", "--plot", "jobshop_v0"], "'jobshop_v0' is the env, not a FILE: put it before"),
    (["run", "jobshop_v0", "--plot", "episode"], "'episode' has no picture suffix"),
    (["run", "nosuch_module:Env"], "cannot import 'nosuch_module'"),
    (["run", "devkit.plain_envs:Kinds", "--policy", "heuristic"],
     "has no heuristic(obs, mask) in its module; use --policy random"),
    (["run", "jobshop_v0", "--preset", "huge"],
     "unknown preset 'huge' for jobshop_v0; valid: small, default, large"),
    (["run", "jobshop_v0", "--policy", "smart"], "argument --policy: invalid choice"),
    (["run", "jobshop_v0", "--seed", "-1"], "--seed: expected an integer in 0..4294967295"),
    (["run", "jobshop_v0", "--seed", "1.5"], "got '1.5'"),
    (["run", "jobshop_v0", "--seed", "a"], "got 'a'"),
    (["run", "jobshop_v0", "--seed", str(2**32)], "got '4294967296'"),
    (["bench", "--presets", "huge"], "--presets: unknown preset 'huge' for jobshop_v0"),
    (["bench", "--scenarios", "nosuch_v0"], "--scenarios: unknown scenario 'nosuch_v0'"),
    (["bench", "--scenarios", "jobshop_v0/huge"], "--scenarios: unknown preset 'huge'"),
    (["bench", "--scenarios", "jobshop_v0/small", "--presets", "large"],
     "--presets would change nothing"),
    (["bench", "--modes", "serial,warp"], "--modes: unknown mode(s) ['warp']"),
    (["bench", "--modes", "serial", "--workers", "2"], "none of the modes ['serial'] has"),
    (["bench", "--steps", "0"], "--steps: expected a positive integer, got '0'"),
    (["bench", "--steps", "-5"], "got '-5'"),
    (["bench", "--repeats", "0"], "--repeats: expected a positive integer"),
    (["bench", "--num-envs", "0,4"], "--num-envs: expected comma-separated positive"),
    (["bench", "--workers", "x"], "--workers: expected comma-separated positive"),
    (["bench", "--warmup", "1.5"], "--warmup: expected a number in [0, 1]"),
    (["bench", "--seed", "-1"], "--seed: expected an integer in 0..4294967295"),
    (["bench", "--seed", "1.5"], "--seed: expected an integer in 0..4294967295"),
    (["bench", "--plot", "no/such/folder/p.png"], "--plot: folder 'no/such/folder'"),
    (["bench", "--plot", "p.nosuchformat"], "--plot: cannot write 'p.nosuchformat'"),
    (["bench", "--out", "no/such/folder/r.json"], "--out: folder 'no/such/folder'"),
    (["bench", "--envs-per-worker", "2"], "--envs-per-worker: only with --autotune"),
    (["bench", "--quick", "--standard"], "not allowed with argument"),
    (["bench", "--autotune", "nosuch_v0"], "--autotune: unknown scenario"),
    (["bench", "--autotune", "jobshop_v0", "--presets", "huge"], "unknown preset 'huge'"),
    (["bench", "--autotune", "jobshop_v0", "--num-envs", "4"], "sweeps its own"),
    (["bench", "--autotune", "jobshop_v0", "--modes", "warp"], "--modes: unknown mode"),
    (["leaderboard", "--dir", "no/such/folder"], "--dir: no folder 'no/such/folder'"),
    (["scores"], "required: POLICY, NAME"),
    (["scores", "random", "--summary"], "--summary: reads the entries of a folder"),
    (["scores", "--summary", "no/such/folder"], "--summary: no folder 'no/such/folder'"),
    (["scores", "random", "nosuch_v0"], "unknown scenario 'nosuch_v0'"),
    (["scores", "random", "jobshop_v0", "--preset", "huge"], "unknown preset 'huge'"),
    (["scores", "random", "jobshop_v0", "--seeds", "1"], "--seeds: a confidence interval"),
    (["scores", "random", "jobshop_v0", "--seeds", "0"], "--seeds: expected a positive"),
    (["scores", "nosuch_module:policy", "jobshop_v0"], "cannot import 'nosuch_module'"),
    (["scores", "deszoo.policies:nosuch", "jobshop_v0"], "has no attribute 'nosuch'"),
    (["scores", "smart", "jobshop_v0"], "expected random, heuristic, MODULE:ATTR or a saved"),
    (["scores", "no/such/model.zip", "jobshop_v0"], "no file 'no/such/model.zip'"),
    (["scores", "random", "jobshop_v0", "--train-wall", "3"], "--train-wall: only for a"),
    (["scores", "x.zip", "jobshop_v0", "--train-wall", "nan"], "--train-wall: expected a "
                                                              "positive number, got 'nan'"),
    (["bench", "--out", "r.png", "--plot", "r.png"], "--plot: 'r.png' is the --out file too"),
    (["bench", "--list-modes", "--scenarios", "x", "--workers", "3"],
     "--list-modes: lists the modes and runs nothing; --scenarios, --workers would be"),
    (["scores", "random", "jobshop_v0", "--out", "no/such/folder"], "--out: no folder"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_argument_is_one_line_and_exit_2(argv, message, capsys, no_work):
    """Every bad argument: exit status 2, one line on stderr, nothing run, nothing printed."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("deszoo: error: ") and err.count("\n") == 1, err
    assert message in err
    assert "--help')" in err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"deszoo {deszoo.__version__}\n"


@pytest.mark.parametrize("command", [[], ["run"], ["list"], ["bench"], ["leaderboard"],
                                     ["scores"]])
def test_help_is_plain_text(command, capsys):
    """--help exits 0 and shows no reStructuredText markup."""
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "``" not in out and ":func:" not in out


@pytest.mark.parametrize("command", ["run", "bench"])
def test_help_lists_presets_and_seeds(command, capsys):
    assert main([command, "--help"]) == 0
    out = capsys.readouterr().out
    for name in list_envs():
        assert any(line.split() == [name, "small,", "default,", "large"]
                   for line in out.splitlines()), name
    assert "0..4294967295" in out and "seeds:" in out


def test_run_prints_the_episode(capsys):
    """`deszoo run` plays a seeded episode: the same seed gives the same figures."""
    argv = ["run", "jobshop_v0", "--preset", "small", "--seed", str(2**32 - 1)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert first.startswith("scenario          jobshop_v0 (preset small, seed 4294967295)")
    assert main(argv) == 0
    again = capsys.readouterr().out
    drop = ("wall time",)
    assert ([line for line in first.splitlines() if not line.startswith(drop)]
            == [line for line in again.splitlines() if not line.startswith(drop)])


def test_list(capsys):
    assert main(["list"]) == 0
    assert capsys.readouterr().out.split() == list_envs()


def plan(argv: list[str]):
    """The plan that `deszoo bench` would run, without running it."""
    from deszoo.bench.cli import check_bench
    from deszoo.cli import build_parser

    return check_bench(build_parser().parse_args(["bench", *argv]))


def test_bench_options_change_the_quick_works():
    """--presets, --steps and --seed apply to the quick suite's works (not ignored)."""
    works = plan([]).matrix.works()
    assert [(w.label, w.env_steps, w.seed) for w in works] == [
        ("jobshop_v0/default", 8192, 0), ("traffic_v1/large", 512, 0)]
    works = plan(["--presets", "small,large"]).matrix.works()
    assert [(w.label, w.env_steps) for w in works] == [
        ("jobshop_v0/small", 8192), ("jobshop_v0/large", 8192),
        ("traffic_v1/small", 512), ("traffic_v1/large", 512)]
    works = plan(["--steps", "100", "--seed", "7"]).matrix.works()
    assert {(w.env_steps, w.seed) for w in works} == {(100, 7)}
    works = plan(["--scenarios", "elevator_v0,warehouse_v0/small", "--presets", "large"])
    assert [w.label for w in works.matrix.works()] == [
        "elevator_v0/large", "warehouse_v0/small"]


# ---- Ctrl-C and closed pipes: in a real process -----------------------------------------
def test_closed_pipe_ends_quietly():
    """stdout closed before `deszoo run` writes: exit 141 (128 + SIGPIPE), nothing on
    stderr (no BrokenPipeError traceback, no 'Exception ignored')."""
    proc = subprocess.Popen([*CLI, "run", "jobshop_v0", "--preset", "small"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader goes away before the first line
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == EXIT_PIPE
    assert err == ""


def test_closed_pipe_ends_bench_quietly():
    """The same for `deszoo bench`, whose output goes through rich (which would exit 1)."""
    proc = subprocess.Popen([*CLI, "bench", "--list-modes"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == EXIT_PIPE
    assert err == ""


def test_piped_into_head():
    """`python -m deszoo.cli run ... | head -1`: head's one line, no traceback, whether the
    pipe closed before or after deszoo's last write."""
    run = subprocess.Popen([*CLI, "run", "jobshop_v0", "--preset", "small"], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    head = subprocess.run(["head", "-1"], stdin=run.stdout, capture_output=True, text=True,
                          timeout=120)
    run.stdout.close()
    err = run.stderr.read()
    assert run.wait(timeout=120) in (0, EXIT_PIPE)
    assert head.stdout.startswith("scenario ") and head.stdout.count("\n") == 1
    assert "Traceback" not in err and "Exception ignored" not in err


def test_ctrl_c_during_run():
    """SIGINT to a running episode: exit 130 and one line, no traceback."""
    proc = subprocess.Popen([*CLI, "run", "ridehail_v0", "--preset", "large"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # printed as the episode starts (seconds long)
        assert first.startswith("scenario "), first + proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == EXIT_INTERRUPTED
    assert err == "deszoo: interrupted\n"


def test_run_plot_draws_the_episode(tmp_path, capsys):
    out = tmp_path / "episode.png"
    assert main(["run", "loadbalance_v0", "--preset", "small", "--plot", str(out)]) == 0
    assert out.stat().st_size > 10_000
    assert "chart of the episode" in capsys.readouterr().out


def test_run_and_plot_a_users_env(tmp_path, capsys):
    """deszoo run takes MODULE:ATTR as deszoo check does: random legal actions when the
    module has no heuristic, and a generic chart."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "kinds.png"
    assert main(["run", "devkit.plain_envs:Kinds", "--seed", "3", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "policy            random" in out and "SimPy events      n/a" in out
    assert "base_0" in out and png.stat().st_size > 10_000
    assert main(["run", "examples.custom_model:ClinicEnv", "--policy", "random"]) == 0
    assert "SimPy events " in capsys.readouterr().out


def test_scores_writes_its_entry_into_the_current_folder(tmp_path, monkeypatch, capsys):
    """An installed command never writes into the repository by default."""
    monkeypatch.chdir(tmp_path)
    assert main(["scores", "random", "loadbalance_v0", "--preset", "small", "--seeds",
                 "2"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["loadbalance_v0-small-random.json"]


@pytest.mark.parametrize("target", ["devkit.plain_envs:Continuous", "test_check:MultiActions"])
def test_run_random_replays_an_env_without_masks_or_of_multidiscrete_actions(target, capsys):
    """The random policy draws from the seed for every space (Box actions came from the
    space's own unseeded sample(), so the same seed gave another episode each run)."""
    outs = []
    for _ in range(2):
        assert main(["run", target, "--seed", "3"]) == 0
        out = capsys.readouterr().out
        outs.append(out[out.rindex("agent "):])  # the returns, after the timings
    assert outs[0] == outs[1]


def test_bench_replaces_a_result_file_only_with_force(tmp_path, capsys):
    """A result file is kept (it was replaced silently, a run's figures lost)."""
    out = tmp_path / "r.json"
    out.write_text("{}")
    assert main(["bench", "--scenarios", "jobshop_v0/small", "--modes", "serial",
                 "--steps", "64", "--repeats", "1", "--out", str(out)]) == 2
    assert "exists; pass --force to replace it" in capsys.readouterr().err
    assert out.read_text() == "{}"
    assert main(["bench", "--scenarios", "jobshop_v0/small", "--modes", "serial",
                 "--steps", "64", "--repeats", "1", "--out", str(out), "--force",
                 "--no-progress"]) == 0
    assert out.read_text() != "{}"


def test_repeated_list_values_run_once():
    """--num-envs 2,2 ran every row twice and took the second serial row as the reference."""
    from deszoo.cli import build_parser

    args = build_parser().parse_args(["bench", "--num-envs", "2,2,4", "--modes",
                                      "serial,shm,serial", "--scenarios", "a,a"])
    assert (args.num_envs, args.modes, args.scenarios) == ([2, 4], ["serial", "shm"], ["a"])
