"""A user's own model in every command: bench it, profile it, catch the model that never ends.

The models are in tests/usermodels/, outside the package, and the commands take them as
``MODULE:ATTR`` from that folder, as a user's shell would (workers import them by name).
No test here asserts a speed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from deszoo._links import DOCS
from deszoo.bench.modes import available_modes
from deszoo.cli import main

MODELS = Path(__file__).resolve().parent / "usermodels"
CLI = [sys.executable, "-m", "deszoo.cli"]
LOCAL = [m for m in available_modes() if m != "ray"]  # serial, roundrobin, supersuit, shm


def deszoo(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``deszoo ARGV`` in the models' folder (a hang guard, not a speed bound)."""
    return subprocess.run([*CLI, *argv], cwd=MODELS, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def in_models(monkeypatch):
    """The current folder is the models' (``MODULE:ATTR`` imports from it)."""
    monkeypatch.chdir(MODELS)
    monkeypatch.syspath_prepend(str(MODELS))


# ---- bench ------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["carwash_env:CarwashEnv", "plain_env:Counters"])
def test_bench_quick_takes_a_users_env_on_every_local_backend(target):
    run = deszoo("bench", "--scenarios", target, "--quick", "--modes", ",".join(LOCAL),
                 "--num-envs", "2", "--workers", "1", "--steps", "64", "--repeats", "1",
                 "--no-progress")
    assert run.returncode == 0, run.stdout + run.stderr
    table = run.stdout
    for mode in LOCAL:
        assert f" {mode} " in table, (mode, table)
    assert "failed" not in table
    assert run.stdout.strip().splitlines()[-1].startswith("conclusion: ")


@pytest.mark.parametrize("command", ["run", "run --plot", "scores", "bench --autotune"])
def test_every_command_that_takes_a_scenario_takes_a_users_env(command, tmp_path):
    """The commands not tested above on the carwash (check, bench and profile are)."""
    target = "carwash_env:CarwashEnv"
    argv = {
        "run": ["run", target, "--preset", "small"],
        "run --plot": ["run", target, "--preset", "small", "--plot", str(tmp_path / "e.png")],
        "scores": ["scores", "random", target, "--preset", "small", "--seeds", "2",
                   "--out", str(tmp_path)],
        "bench --autotune": ["bench", "--autotune", target, "--envs-per-worker", "1,2",
                             "--workers", "1", "--steps", "128", "--repeats", "1",
                             "--no-progress"],
    }[command]
    if command == "run --plot":
        pytest.importorskip("matplotlib")
    run = deszoo(*argv)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    if command.startswith("run"):
        assert out.startswith(f"scenario          {target} (preset small, seed 0)"), out
        assert "simulated time    50.00" in out, out  # the small preset's max_time (not 200)
    if command == "run --plot":
        assert (tmp_path / "e.png").stat().st_size > 0
    if command == "scores":
        (entry,) = tmp_path.glob("*.json")
        assert '"scenario": "carwash_env:CarwashEnv"' in entry.read_text()
    if command == "bench --autotune":
        assert "recommended: deszoo.vector.make_vec(CarwashEnv" in out, out


def test_bench_train_takes_a_users_env(tmp_path):
    """Every learner of ``bench --train`` on the carwash: SB3 and deszoo's loop through
    make_vec (workers import the module by name), the SuperSuit chain on the env itself."""
    import json

    for module in ("torch", "stable_baselines3", "supersuit"):
        pytest.importorskip(module)
    out = tmp_path / "train.json"
    run = deszoo("bench", "--train", "--scenarios", "carwash_env:CarwashEnv/small",
                 "--num-envs", "2", "--workers", "2", "--steps", "256", "--repeats", "1",
                 "--no-progress", "--out", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    rows = json.loads(out.read_text())["rows"]
    assert {r["learner"] for r in rows} == {"supersuit-chain", "sb3", "ppo-loop",
                                            "ppo-loop-halves", "ppo-loop-pipelined"}
    for r in rows:
        assert r["scenario"] == "carwash_env:CarwashEnv" and r["preset"] == "small", r
        assert r["error"] is None and r["timesteps"] >= 256, r


def test_bench_quick_with_scenarios_is_small_work(in_models):
    from deszoo.bench.cli import QUICK_SCENARIO_REPEATS, QUICK_SCENARIO_STEPS
    from deszoo.cli import build_parser

    args = build_parser().parse_args(["bench", "--scenarios", "carwash_env:CarwashEnv/small",
                                      "--quick"])
    plan = args.cmd_check(args)
    (work,) = plan.matrix.works()
    assert (work.scenario, work.preset) == ("carwash_env:CarwashEnv", "small")
    assert work.env_steps == QUICK_SCENARIO_STEPS
    assert plan.matrix.repeats == QUICK_SCENARIO_REPEATS
    # --steps changes the steps only (it used to bring back the full suite's repeats)
    args = build_parser().parse_args(["bench", "--scenarios", "carwash_env:CarwashEnv/small",
                                      "--quick", "--steps", "500"])
    plan = args.cmd_check(args)
    assert plan.matrix.works()[0].env_steps == 500
    assert plan.matrix.repeats == QUICK_SCENARIO_REPEATS
    assert plan.matrix.suite == "custom"  # chosen scenarios: not the quick suite's work


@pytest.mark.parametrize(("argv", "message"), [
    (["bench", "--scenarios", "nosuch_module:Env"], "--scenarios: cannot import 'nosuch_module'"),
    (["bench", "--scenarios", "carwash_env:Nope"], "has no attribute 'Nope'"),
    (["bench", "--scenarios", "carwash_env:CarwashEnv/huge"], "unknown preset 'huge'"),
    (["bench", "--scenarios", "plain_env:Counters/small"], "declares no presets"),
    (["profile", "nosuch_v0"], "unknown scenario 'nosuch_v0'"),
    (["profile", "carwash_env:CarwashEnv", "--preset", "huge"], "unknown preset 'huge'"),
    (["profile", "jobshop_v0", "--modes", "warp"], "--modes: unknown or unavailable"),
    (["profile", "jobshop_v0", "--no-vector", "--modes", "shm"], "not with --no-vector"),
    (["run", "plain_env:Counters", "--preset", "fast"], "declares no presets"),
    (["run", "carwash_env:CarwashEnv", "--preset", "huge"], "unknown preset 'huge'"),
    (["run", "broken_models:needs"], "building broken_models:needs raised TypeError: needs() "
                                     "missing 1 required positional argument: 'horizon'"),
    (["run", "broken_models:not_env"], "built a int, not a PettingZoo ParallelEnv"),
    (["profile", "broken_models:not_env", "--no-vector"], "built a int, not a PettingZoo"),
    (["run", "broken_models:Turns"], "is an AEC env (Turns)"),
    (["bench", "--scenarios", "broken_models:Multi", "--quick"], "has MultiDiscrete actions; "
                                                                 "the benchmark's policy"),
    (["profile", "broken_models:Multi", "--modes", "shm"], "the vector rows need Discrete"),
    (["check", "./plain_env.py:Counters"], "is a file path; give the module's import name, "
                                           "run from the folder it is imported from: "
                                           "plain_env:Counters"),
])
def test_bad_arguments_name_the_problem(argv, message, in_models, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


# ---- the conclusion line ------------------------------------------------------------------
def _result(free: float, speedups: dict, spread: float = 0.05) -> dict:
    """A result of one work: serial and the given modes' speed-ups, ``free`` cores free."""
    rows = []
    for mode, speedup in {"serial": 1.0, **speedups}.items():
        workers = 0 if mode in ("serial", "roundrobin") else 2
        rows.append({"scenario": "mine:Env", "preset": "default", "mode": mode,
                     "num_envs": 8, "num_workers": workers, "status": "ok",
                     "speedup_vs_serial": None if mode == "serial" else speedup,
                     "env_steps_per_s": 20_000 * speedup, "spread": spread})
    return {"rows": rows, "machine": {"usable_cores": 2, "free_cores_start": free,
                                      "free_cores_end": free + 0.2}}


def test_conclusion_names_the_best_mode_and_its_speedup():
    from deszoo.bench.report import conclusion

    line = conclusion(_result(1.9, {"roundrobin": 0.9, "shm": 1.7}))
    assert line == ("conclusion: parallel sampling pays here: shm with 2 workers is fastest "
                    "on mine:Env/default, 1.70x serial")


def test_conclusion_on_a_busy_machine_says_why_and_what_to_run():
    from deszoo.bench.report import conclusion

    line = conclusion(_result(0.4, {"roundrobin": 0.8, "shm": 0.7}, spread=0.6))
    assert line.startswith("conclusion: no vector mode beat serial on mine:Env/default "
                           "(best: roundrobin, 0.80x)")
    assert "only 0.4 of 2 cores were free during the run" in line
    assert "the repeats spread up to 60%" in line
    assert "an idle machine" in line and "fewer workers (--workers 1)" in line
    assert "more envs per worker (--num-envs 32)" in line  # a 50 us step is cheap


def test_conclusion_when_parallel_wins_on_one_work_and_loses_on_another():
    from deszoo.bench.report import conclusion

    result = _result(1.9, {"roundrobin": 0.9, "shm": 1.7})
    light = _result(1.9, {"roundrobin": 0.8, "shm": 0.9})["rows"]
    for r in light:
        r["scenario"], r["env_steps_per_s"] = "light:Env", r["env_steps_per_s"] * 3
    result["rows"] += light
    line = conclusion(result)
    assert line.startswith("conclusion: shm with 2 workers is fastest on mine:Env/default, "
                           "1.70x serial; no vector mode beat serial on light:Env/default "
                           "(best: shm with 2 workers, 0.90x): a step takes 17 us"), line
    assert "idle machine" not in line and "more envs per worker (--num-envs 32)" in line


def test_conclusion_suggests_fewer_workers_only_when_no_row_ran_with_as_few():
    from deszoo.bench.report import conclusion

    result = _result(1.1, {"shm": 0.77})
    one = dict(result["rows"][-1], num_workers=1, speedup_vs_serial=0.83)
    line = conclusion(result)
    assert "fewer workers (--workers 1)" in line, line
    result["rows"].append(one)  # shm with 1 worker ran too (and lost)
    line = conclusion(result)
    assert "best: shm with 1 worker, 0.83x" in line and "fewer workers" not in line, line
    assert "an idle machine" in line
    many = _result(2.2, {"shm": 0.6})
    for r in many["rows"]:
        r["num_workers"] = 4 if r["mode"] == "shm" else 0
    many["machine"]["usable_cores"] = 4
    assert "fewer workers (--workers 2)" in conclusion(many)


def test_busy_bench_prints_the_conclusion_last(monkeypatch, capsys):
    """The load reading faked: 0.3 free cores before and after the run."""
    import deszoo.bench.machine
    import deszoo.bench.runner

    monkeypatch.setattr(deszoo.bench.machine, "free_cores", lambda seconds=0.25: 0.3)
    monkeypatch.setattr(deszoo.bench.runner, "free_cores", lambda seconds=0.25: 0.3)
    assert main(["bench", "--scenarios", "jobshop_v0/small", "--modes", "serial,roundrobin",
                 "--steps", "48", "--repeats", "1", "--no-progress"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("conclusion: "), last
    assert "only 0.3 of" in last or "with 0.3 free cores" in last, last


# ---- profile ------------------------------------------------------------------------------
def test_profile_of_a_users_env_on_every_local_backend():
    vector = [m for m in LOCAL if m != "serial"]
    run = deszoo("profile", "carwash_env:CarwashEnv", "--steps", "300", "--num-envs", "2",
                 "--workers", "1", "--modes", ",".join(vector), "--repeats", "1")
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    for words in ("model (its own code)", "bridge (deszoo.core)", "events, ",
                  "sum of the parts = the measured step", "_observe_all", "carwash_env.py:",
                  "dict API (PettingZoo's step)", "what would pay most:"):
        assert words in out, (words, out)
    for mode in vector:
        line = next(x for x in out.splitlines() if x.startswith(mode + " "))
        assert "failed" not in line, line


def test_profile_parts_add_up_and_name_the_models_functions(in_models):
    from deszoo.profile import PARTS, format_report, profile

    r = profile("carwash_env:CarwashEnv", preset="small", steps=300, modes=(), repeats=1,
                sample_seconds=0.2)
    assert [p.name for p in r.parts] == list(PARTS)
    assert sum(p.us for p in r.parts) == pytest.approx(r.step_us)
    assert all(p.us >= 0 and p.library_us <= p.us + 1e-9 for p in r.parts)
    assert r.events_per_step > 1 and r.profiled_us > 0 and r.samples > 0
    names = {f.name for f in r.functions}
    assert {"_observe_all", "bay", "arrivals", "_flush"} <= names
    assert all(f.where.startswith("carwash_env.py:") for f in r.functions)
    assert 1 <= len(r.advice) <= 3
    text = format_report(r)
    assert "what would pay most:" in text
    assert "docs/" not in text.replace(DOCS, ""), text  # a wheel has no docs/: URLs only


def test_profile_of_a_plain_parallel_env(in_models):
    from deszoo.profile import profile

    r = profile("plain_env:Counters", steps=200, modes=(), repeats=1, sample_seconds=0)
    assert r.events_per_step is None and r.dict_us is None and r.samples == 0
    assert r.part("model").us > 0 and r.part("SimPy").us == 0
    assert any(f.where.startswith("plain_env.py:") for f in r.functions)


@pytest.mark.parametrize("name", ["loadbalance_v0", "traffic_v1"])
def test_profile_of_a_scenario_counts_its_events(name):
    from deszoo.profile import profile

    r = profile(name, preset="small", steps=200, modes=(), repeats=1, sample_seconds=0)
    assert r.events_per_step > 1
    assert sum(p.us for p in r.parts) == pytest.approx(r.step_us)  # no time left unattributed
    assert r.part("SimPy").us > 0 and r.part("model").us > 0 and r.part("bridge").us > 0
    assert all("envs" in f.where or f.where.split(":")[0] in ("env.py", "model.py")
               for f in r.functions[:3])


# ---- the model that never ends -------------------------------------------------------------
def test_check_fails_a_model_that_never_ends_naming_the_fix():
    run = deszoo("check", "forever_env:ForeverEnv", "--steps", "30")
    assert run.returncode == 1, run.stdout + run.stderr
    line = next(x for x in run.stdout.splitlines() if "episode ends" in x)
    assert line.startswith("FAIL  episode ends")
    # whichever bound came first: 100,000 steps take ~8 s here, more than 20 s on a busy host
    assert re.search(r"had not ended after (100000 steps|2\d s \(\d+ steps\))", line), line
    assert "max_time" in line
    assert "8 of 9 checks passed; failed: episode ends" in run.stdout
    ok = deszoo("check", "carwash_env:CarwashEnv", "--steps", "30")
    assert ok.returncode == 0 and "9 of 9 checks passed" in ok.stdout, ok.stdout


def test_check_stops_at_a_step_that_never_returns(in_models):
    """A model whose agents never reach a decision: reset itself never returns."""
    import deszoo.core
    from deszoo.checks import check

    class Busy(deszoo.core.SimPyParallelEnv):
        metadata = {"name": "busy_v0", "render_modes": []}

        def _setup(self):
            return deszoo.core.discrete(["a"], [0.0], [1.0], 2)

        def _build(self):
            def tick():
                while True:
                    yield self.sim.timeout(1.0)

            self.sim.process(tick())

        def _observe_all(self, obs):
            obs[:] = 0.0

    verdicts = check(Busy, steps=10, episode_seconds=0.5)
    assert [(v.name, v.ok) for v in verdicts] == [("builds", False)] or \
        [(v.name, v.ok) for v in verdicts][-1] == ("episode ends", False)
    last = verdicts[-1]
    assert "did not return within" in last.detail and "max_time" in last.detail, last.detail


def test_check_takes_slow_steps_for_slow_not_hung(in_models):
    """The hang watchdog times each reset and step, not the episode: slow steps that add up
    past --episode-seconds fail "episode ends" only, and every other check still runs (it
    said step 2 hung and skipped the rest), naming the step after the reset right."""
    import time

    from plain_env import Counters

    from deszoo.checks import check

    class Slow(Counters):
        steps = [0]  # in this process: the first episode's steps 1 and 2 are slow

        def step(self, actions):
            self.steps[0] += 1
            time.sleep({1: 0.3, 2: 1.2}.get(self.steps[0], 0.0))
            return super().step(actions)

    verdicts = check(Slow, steps=2, episode_seconds=0.4)  # a call may take 1.4 s
    ends = next(v for v in verdicts if v.name == "episode ends")
    assert not ends.ok and "had not ended after" in ends.detail, ends.detail
    assert len(verdicts) == 9


def test_check_bound_is_an_option(in_models, capsys):
    assert main(["check", "forever_env:ForeverEnv", "--steps", "20", "--episode-steps",
                 "500"]) == 1
    out = capsys.readouterr().out
    assert "had not ended after 500 steps" in out and "--episode-steps" in out


def test_run_stops_a_model_that_never_ends_with_a_message(in_models, capsys):
    assert main(["run", "forever_env:ForeverEnv", "--max-steps", "300"]) == 1
    out, err = capsys.readouterr()
    assert "episode ended by  step cap" in out and "env steps         300" in out
    assert err.startswith("\ndeszoo run: stopped after 300 steps (--max-steps)")
    assert "max_time" in err


def test_run_default_cap_is_stated_in_help(capsys):
    assert main(["run", "--help"]) == 0
    assert "--max-steps N" in capsys.readouterr().out


def test_run_says_when_a_step_does_not_return(capsys):
    """deszoo run's stall notice (here after 0.1 s instead of 20): never a silent hang."""
    import time

    from deszoo.cli import _stall_notice

    with _stall_notice(0.1) as on_step:
        on_step(None, {}, {})  # the reset returned
        time.sleep(0.35)  # step 1 does not return
    err = capsys.readouterr().err
    assert err.startswith("deszoo run: step 1 has not returned for 0."), err
    assert "deszoo check names the fix" in err
    # The first notice comes once the step has run that long (it came after twice that:
    # the first tick only took note of the step).
    with _stall_notice(0.4) as on_step:
        on_step(None, {}, {})
        time.sleep(0.7)
    assert "has not returned for 0." in capsys.readouterr().err


def test_the_bounds_are_one_figure():
    """cli.py keeps its own copy of the bounds (so that --help imports nothing heavy)."""
    from deszoo import checks, cli

    assert (cli.EPISODE_STEPS, cli.EPISODE_SECONDS) == (checks.EPISODE_STEPS,
                                                        checks.EPISODE_SECONDS)


def test_advice_gives_a_range_where_the_sampler_disagrees():
    from deszoo.profile import Part, _share

    assert _share(Part("SimPy", 30.0, 90.0, 3.0, 40.0, sampled=0.33), 100.0) == (0.3, "30%")
    mid, said = _share(Part("SimPy", 43.0, 90.0, 3.0, 40.0, sampled=0.17), 100.0)
    assert mid == pytest.approx(0.30) and said == "17%-43% (profile and sampler)"


def test_a_module_that_fails_to_import_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    """A SyntaxError or an exception at import is the user's: one line with where it is
    (it was a traceback through deszoo)."""
    (tmp_path / "oops_model.py").write_text("raise RuntimeError('import-time boom')\n")
    (tmp_path / "typo_model.py").write_text("def f(:\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["check", "oops_model:Env"]) == 2
    assert ("importing 'oops_model' raised RuntimeError: import-time boom (oops_model.py:1)"
            in capsys.readouterr().err)
    assert main(["run", "typo_model:Env"]) == 2
    assert "importing 'typo_model' raised SyntaxError" in capsys.readouterr().err
    # A file named as a standard-library module would hide it (cProfile imports profile).
    (tmp_path / "profile.py").write_text("class Env:\n    pass\n")
    assert main(["profile", "profile:Env", "--no-vector"]) == 2
    assert "./profile.py has the name of a standard-library module" in capsys.readouterr().err


def test_run_default_preset_of_an_env_without_presets(in_models, capsys):
    """--preset default is every env's own defaults (it was passed as preset="default" to a
    class that takes no preset, a TypeError)."""
    assert main(["run", "plain_env:Counters", "--preset", "default"]) == 0


def test_profile_of_an_env_the_vector_rows_cannot_drive_reports_without_them(in_models,
                                                                            capsys):
    """MultiDiscrete actions: the report comes without the vector rows, saying why (the
    whole profile ran, then a traceback)."""
    assert main(["profile", "broken_models:Multi", "--steps", "100", "--repeats", "1"]) == 0
    out, err = capsys.readouterr()
    assert "profiled without the vector rows" in err and "adapter" in out


def test_bench_and_profile_say_when_a_phase_shows_no_progress(capsys):
    """The notice deszoo bench and profile print (here after 0.2 s instead of 60) while a
    row or phase makes no progress: a step that never returns is not a silent hang."""
    import time

    from deszoo._cliargs import stall_watch

    with stall_watch("deszoo bench", 0.2) as note:
        note("hang_env:HangEnv serial")
        time.sleep(0.5)
    err = capsys.readouterr().err
    assert "deszoo bench: no progress for 0." in err and "(hang_env:HangEnv serial)" in err
    with stall_watch("deszoo profile", 0.4) as note:
        for _ in range(6):  # progress every 0.1 s: nothing to say
            note("recording")
            time.sleep(0.1)
    assert capsys.readouterr().err == ""
