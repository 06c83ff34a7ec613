"""Tests of the benchmark harness (deszoo.bench): work, modes, schema, leaderboard, CLI.

No test here asserts a speed: figures on a shared machine say nothing about correctness.
"""

from __future__ import annotations

import copy
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from deszoo.bench import leaderboard, schema
from deszoo.bench.autotune import autotune_configs, autotune_matrix, recommend
from deszoo.bench.machine import deszoo_commit
from deszoo.bench.modes import available_modes, is_in_process, open_session
from deszoo.bench.runner import Matrix, run_matrix
from deszoo.bench.work import Work, masked_actions, priorities, standard_work, work_hash
from deszoo.cli import main
from deszoo.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = "jobshop_v0"
TINY = {"presets": ["small"], "env_steps": 48, "repeats": 2, "warmup_fraction": 0.1}
# Multiprocess modes are slow to start; test every mode once, on the smallest work.
MODES = [m for m in available_modes() if m != "ray"]


@pytest.fixture(scope="module")
def tiny_result() -> dict:
    """One tiny run over every mode (3 envs, 1 worker), shared by several tests."""
    matrix = Matrix(scenarios=[SCENARIO], modes=MODES, num_envs=[3], num_workers=[1], **TINY)
    return run_matrix(matrix)


def as_standard(result: dict) -> dict:
    """A copy of ``result`` relabelled as having done the standard work (for leaderboard
    tests: running the real standard work would take too long here)."""
    result = copy.deepcopy(result)
    works = {}
    remap = {}
    for key, work in result["works"].items():
        std = standard_work(work["scenario"], work["preset"]).to_dict()
        new = work_hash(std)
        works[new] = std
        remap[key] = new
    result["works"] = works
    for row in result["rows"]:
        row["work_hash"] = remap[row["work_hash"]]
    result["work_hash"] = schema.results_work_hash(result["rows"])
    return schema.check(result)


# ---- work ------------------------------------------------------------------------------
def test_work_hash_is_pinned():
    """The standard work's hash is fixed: changing it invalidates every leaderboard entry."""
    assert standard_work("jobshop_v0").hash == "1077bfb9dc15eede"


def test_work_hash_depends_on_what_is_simulated_only():
    """Hash ignores env_kwargs order; changes with steps, seed, preset or arguments."""
    a = Work("jobshop_v0", env_kwargs={"n_jobs": 5, "n_machines": 2})
    b = Work("jobshop_v0", env_kwargs={"n_machines": 2, "n_jobs": 5})
    assert a.hash == b.hash == work_hash(json.loads(json.dumps(a.to_dict())))
    others = [
        Work("jobshop_v0", env_steps=100),
        Work("jobshop_v0", seed=1),
        Work("jobshop_v0", preset="small"),
        Work("jobshop_v0", env_kwargs={"n_jobs": 6, "n_machines": 2}),
    ]
    assert len({a.hash, *(w.hash for w in others)}) == 5


def test_masked_actions_are_legal_and_uniform():
    """argmax(mask * priorities) picks only legal actions, each about equally often."""
    work = Work("x", env_steps=4000)
    prio = priorities(work, 1, 2, 5)[:, 0]
    mask = np.array([[1, 0, 0, 0, 0], [0, 1, 0, 1, 1]], dtype=np.int8)
    scratch = np.empty((2, 5), dtype=np.float32)
    picks = np.array([masked_actions(mask, p, scratch) for p in prio])
    assert (picks[:, 0] == 0).all()
    counts = np.bincount(picks[:, 1], minlength=5)
    assert counts[0] == counts[2] == 0
    assert all(abs(c / len(picks) - 1 / 3) < 0.05 for c in counts[[1, 3, 4]])


def test_priorities_do_not_depend_on_the_block_size():
    """Env i's priorities are the same drawn at once or block by block."""
    from deszoo.bench.work import Priorities

    work = Work("x", env_steps=60)
    whole = Priorities(work, 3, 2, 4).all_block(20)
    small = Priorities(work, 3, 2, 4, block_bytes=3 * 2 * 4 * 4 * 7)
    assert small.block == 7
    blocks = [small.all_block(min(7, 20 - lo)) for lo in range(0, 20, 7)]
    assert np.array_equal(np.concatenate(blocks), whole)
    small.restart()
    env1 = np.concatenate([small.env_block(1, n) for n in (7, 7, 6)])
    assert np.array_equal(env1, whole[:, 1])
    assert whole.min() > 0 and whole.max() <= 1


@pytest.mark.parametrize("mode", ["serial", "roundrobin"])
def test_blocked_priorities_give_the_same_run(mode, monkeypatch):
    """A work too big for one block (drawn block by block, clocks paused) does the same."""
    import deszoo.bench.work as work_module

    work = Work(SCENARIO, "small", env_steps=60)
    sums = []
    for limit in (work_module.BLOCK_BYTES, 3 * 3 * 9 * 4 * 4):
        monkeypatch.setattr(work_module, "BLOCK_BYTES", limit)
        with open_session(work, mode, 3, None) as session:
            session.reset()
            stats = session.run()
            sums.append((session.prio.block, stats.env_steps, stats.reward_sum))
    assert sums[0][0] == 20 and sums[1][0] == 4
    assert sums[0][1:] == sums[1][1:]


# ---- modes -------------------------------------------------------------------------------
def test_modes_come_from_the_vector_backends(monkeypatch):
    """serial first, then every backend deszoo.vector has whose package is installed."""
    from deszoo.bench import modes
    from deszoo.vector import BACKENDS

    assert modes.all_modes()[0] == "serial"
    assert set(modes.all_modes()) == {"serial", *BACKENDS}
    monkeypatch.setitem(BACKENDS, "warp", BACKENDS["roundrobin"])
    monkeypatch.setitem(modes.BACKEND_PACKAGES, "warp", "no_such_package_xyz")
    assert "warp" in modes.all_modes() and "warp" not in modes.available_modes()
    with pytest.raises(ConfigError, match="needs the package 'no_such_package_xyz'"):
        Matrix(scenarios=[SCENARIO], modes=["warp"]).configs()


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_does_the_same_env_steps(mode):
    """Counted at the env or vector env: steps_per_env * num_envs env steps per run."""
    work = Work(SCENARIO, "small", env_steps=40)
    num_envs = 3
    with open_session(work, mode, num_envs, None if is_in_process(mode) else 1) as session:
        calls = []
        if mode == "serial":
            for env in session.envs:
                for name in ("step_arrays", "reset_arrays"):
                    orig = getattr(env, name)
                    setattr(env, name, lambda *a, _o=orig: calls.append(1) or _o(*a))
            session.reset()
            calls.clear()
            stats = session.run()
            steps = len(calls)
        else:
            orig = session.vec.step
            session.vec.step = lambda a: calls.append(1) or orig(a)
            session.reset()
            stats = session.run()
            steps = len(calls) * num_envs
    assert session.steps_per_env == 14
    assert steps == stats.env_steps == 14 * num_envs


def test_every_mode_follows_the_same_trajectories(tiny_result):
    """Same work, same seeds, same actions: equal reward sums and env steps in every mode."""
    rows = tiny_result["rows"]
    assert [r["mode"] for r in rows] == MODES
    assert all(r["status"] == "ok" for r in rows), [r["error"] for r in rows]
    assert {r["env_steps"] for r in rows} == {48}
    assert all(r["matches_serial"] for r in rows)
    assert len({r["reward_sum"] for r in rows}) == 1
    assert {r["sim_events"] for r in rows} == {rows[0]["sim_events"]} and rows[0]["sim_events"]


def test_result_has_every_figure(tiny_result):
    """Each ok row carries throughput, speedup, CPU, memory and the machine record."""
    schema.check(tiny_result)
    for row in tiny_result["rows"]:
        assert row["env_steps_per_s"] > 0 and row["agent_steps_per_s"] > 0
        assert row["events_per_s"] > 0 and row["sim_time_per_s"] > 0
        assert row["speedup_vs_serial"] > 0 and row["parallel_efficiency"] > 0
        assert row["parent_cpu_us_per_step"] >= 0 and row["harness_us_per_step"] >= 0
        assert row["parent_peak_rss_mb"] > 0
        assert len(row["wall_s"]) == 2
        if not is_in_process(row["mode"]):
            assert row["num_workers"] == 1
        if row["mode"] == "shm":
            assert row["worker_processes"] == 1 and row["worker_peak_rss_mb"] > 0
    m = tiny_result["machine"]
    assert m["usable_cores"] >= 1 and m["packages"]["numpy"] and m["cpu_model"]


def test_failed_row_is_reported_not_fatal():
    """A mode that raises gives an error row; the other rows and the schema stay valid."""

    def flaky(work, mode, num_envs, num_workers):
        if mode == "roundrobin":
            raise RuntimeError("boom")
        return open_session(work, mode, num_envs, num_workers)

    m = Matrix(scenarios=[SCENARIO], modes=["serial", "roundrobin"], num_envs=[2], **TINY)
    result = run_matrix(m, open_session=flaky)
    ok, bad = result["rows"]
    assert ok["status"] == "ok" and bad["status"] == "error"
    assert bad["error"] == "RuntimeError: boom" and bad["env_steps_per_s"] is None


# ---- schema ------------------------------------------------------------------------------
def test_schema_rejects_missing_and_mistyped_fields(tiny_result):
    r = copy.deepcopy(tiny_result)
    del r["rows"][0]["env_steps_per_s"]
    r["machine"]["usable_cores"] = "two"
    errors = schema.validate(r)
    assert any("rows[0]: missing field 'env_steps_per_s'" in e for e in errors)
    assert any("machine.usable_cores: expected int, got str" in e for e in errors)
    with pytest.raises(schema.SchemaError, match="missing field"):
        schema.check(r)


def test_schema_rejects_other_versions_and_edited_work(tiny_result):
    r = copy.deepcopy(tiny_result)
    r["schema"] = "deszoo.bench/0"
    assert "this deszoo reads 'deszoo.bench/1'" in schema.validate(r)[0]
    r = copy.deepcopy(tiny_result)
    (key,) = r["works"]
    r["works"][key]["env_steps"] = 99
    assert any("hashes to" in e for e in schema.validate(r))
    r = copy.deepcopy(tiny_result)
    r["work_hash"] = "0" * 16
    assert any("rows' works hash to" in e for e in schema.validate(r))


def as_schema_1(result: dict) -> dict:
    """``result`` as a ``deszoo.bench/1`` file holds it: no version, no commit."""
    result = copy.deepcopy(result)
    result["schema"] = "deszoo.bench/1"
    del result["deszoo_version"], result["commit"]
    return result


def test_result_records_version_and_commit(tiny_result):
    """A result names the deszoo version and the commit of the checkout that ran it."""
    import deszoo

    assert tiny_result["schema"] == schema.SCHEMA == "deszoo.bench/2"
    assert tiny_result["deszoo_version"] == deszoo.__version__
    package = Path(deszoo.__file__).resolve().parent
    if package == ROOT / "deszoo" and (ROOT / ".git").exists() and shutil.which("git"):
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
        assert tiny_result["commit"] in (head, head + "+dirty")
    else:  # an installed package: no commit of deszoo's to name
        assert tiny_result["commit"] == "unknown"


def test_schema_reads_version_1_files_and_requires_the_commit_in_version_2(tiny_result):
    assert schema.validate(as_schema_1(tiny_result)) == []
    r = copy.deepcopy(tiny_result)
    del r["commit"]
    assert any("missing field 'commit'" in e for e in schema.validate(r))
    r = copy.deepcopy(tiny_result)
    r["deszoo_version"] = None
    assert any("result.deszoo_version: expected str" in e for e in schema.validate(r))


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@needs_git
def test_commit_of_a_checkout_clean_and_dirty(tmp_path):
    repo = tmp_path / "repo"
    package = repo / "deszoo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "one")
    head = _git(repo, "rev-parse", "--short", "HEAD")
    assert deszoo_commit(package) == head
    (repo / "result.json").write_text("{}")  # untracked files (an --out) leave it clean
    assert deszoo_commit(package) == head
    (package / "__init__.py").write_text("x = 2\n")
    assert deszoo_commit(package) == head + "+dirty"


@needs_git
def test_commit_unknown_outside_a_checkout_of_deszoo(tmp_path, monkeypatch):
    site = tmp_path / "venv" / "site-packages"
    package = site / "deszoo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    assert deszoo_commit(package) == "unknown"  # no git repository at all
    _git(tmp_path, "init", "-q")  # a venv inside the user's own repository
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "the user's project")
    assert deszoo_commit(package) == "unknown"
    untracked = tmp_path / "new" / "deszoo"  # a checkout that does not track deszoo/
    untracked.mkdir(parents=True)
    _git(untracked.parent, "init", "-q")
    (untracked.parent / "README").write_text("")
    _git(untracked.parent, "add", "README")
    _git(untracked.parent, "commit", "-qm", "x")
    assert deszoo_commit(untracked) == "unknown"
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no git installed
    assert deszoo_commit(ROOT / "deszoo") == "unknown"


def test_bench_from_a_copy_outside_the_repository(tmp_path):
    """deszoo imported from outside a git checkout (as from a wheel): the result says
    ``unknown`` and nothing printed names the repository."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "deszoo", site / "deszoo",
                    ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = ("import deszoo, sys; from deszoo.cli import main; print(deszoo.__file__); "
            "sys.exit(main(sys.argv[1:]))")
    done = subprocess.run(
        [sys.executable, "-c", code, "bench", "--scenarios", f"{SCENARIO}/small", "--modes",
         "serial", "--num-envs", "2", "--steps", "16", "--repeats", "1", "--no-progress",
         "--out", "r.json"],
        cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(str(site / "deszoo"))
    result = json.loads((work / "r.json").read_text())
    assert result["commit"] == "unknown" and schema.validate(result) == []
    assert str(ROOT) not in done.stdout + done.stderr


def test_docs_describe_every_field():
    """docs/benchmarks.md holds the schema's field tables as the schema module renders them."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    assert schema.markdown() in text, "regenerate the tables with deszoo.bench.schema.markdown()"
    assert schema.SCHEMA in text


# ---- report: the table, its flags and warnings, the plot -------------------------------
# The 2026-12-02 leaderboard entry (schema deszoo.bench/1), kept as a realistic result of an
# idle machine after the leaderboard was re-measured on 2026-12-06.
LEADERBOARD_ENTRY = ROOT / "tests" / "data" / "bench-2026-12-02.json"


def busy_result() -> dict:
    """A realistic result (the standard suite, every scenario and mode, from the leaderboard)
    made as bad as a user's busy machine: 0.4 free cores, spreads up to 199 %, a failed row,
    a row off serial's trajectories, and extreme figures."""
    result = json.loads(LEADERBOARD_ENTRY.read_text())
    result["machine"].update(free_cores_start=0.4, free_cores_end=0.9)
    rows = result["rows"]
    rows[3]["spread"] = 1.99
    rows[5].update(env_steps_per_s=1_234_567.0, speedup_vs_serial=123.4, spread=0.07)
    rows[6]["matches_serial"] = False
    rows[7].update(status="error", error="RuntimeError: boom")
    return result


def render(result: dict, width: int, wide: bool = False) -> str:
    from rich.console import Console

    from deszoo.bench.report import print_report

    console = Console(width=width, record=True, file=io.StringIO())
    print_report(console, result, wide=wide)
    return console.export_text()


@pytest.mark.parametrize("result", [busy_result, lambda: json.loads(LEADERBOARD_ENTRY.read_text())])
def test_compact_table_fits_80_columns(result):
    """At 80 columns every figure of the compact table shows in full, legend included."""
    from deszoo.bench.report import legend

    result = result()
    text = render(result, 80)
    assert "…" not in text
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    for row in result["rows"]:
        if row["status"] == "ok":
            rate = row["env_steps_per_s"]
            assert (f"{rate:,.0f}" if rate < 1e6 else f"{rate / 1e6:.2f}M") in text
    assert lines[-3:] == legend() and "docs/benchmarks.md" in lines[-1]
    assert "flag" in lines[1] + lines[2] and "speed-up" in lines[2]


def test_compact_table_cells(tiny_result):
    """Scenario once per work, workers '-' in the parent, speed-up with its spread."""
    text = render(tiny_result, 80)
    assert text.count("jobshop_v0") == 1 and "/small" in text
    serial = next(line for line in text.splitlines() if " serial " in line)
    assert " - " in serial and "1.00x ±" in serial


def test_wide_table_has_every_column():
    """--wide: every column and the flags, no figure cut at 120 columns."""
    from deszoo.bench.report import COLUMNS

    text = render(busy_result(), 120, wide=True)
    assert "…" not in text
    head = " ".join(text.splitlines()[:5])
    for word in ("agent-", "events", "eff.", "RSS MiB", "policy", "flag"):
        assert word in head
    assert len(COLUMNS) == 14 and "1 (0 proc)" in text


def test_flags_mark_busy_and_unsteady_rows():
    """B: free cores short of the row's workers; S: spread over 25 %; P; X."""
    from deszoo.bench.report import free_cores, row_flags

    result = busy_result()
    free = free_cores(result)
    assert free == 0.4
    flags = {(r["mode"], r["num_envs"], r["num_workers"]): row_flags(r, free)
             for r in result["rows"][:8]}
    assert flags[("serial", 8, 0)] == "B"  # needs one core, had 0.4
    assert flags[("supersuit", 8, 2)] == "BS"  # spread 199 %
    assert flags[("supersuit", 8, 1)] == "BP"  # ran in the parent: no worker process
    assert flags[("ray", 8, 1)] == "BPX"  # 9 processes seen; rewards differ from serial
    assert flags[("ray", 8, 2)] == ""  # failed
    idle = json.loads(LEADERBOARD_ENTRY.read_text())
    assert not any("B" in row_flags(r, free_cores(idle)) for r in idle["rows"])


def test_load_warnings_say_why():
    from deszoo.bench.report import load_warnings

    busy, unsteady = load_warnings(busy_result())
    assert busy.startswith("busy machine: 0.4 free cores") and "up to 2 workers" in busy
    assert "more than 25%" in unsteady and "up to 199%" in unsteady
    idle = json.loads(LEADERBOARD_ENTRY.read_text())
    assert [w.split(":")[0] for w in load_warnings(idle)] == ["unsteady timing"]


def test_plot_has_error_bars(tiny_result, tmp_path, monkeypatch):
    """Every mode's points carry error bars from the slowest to the fastest repeat."""
    from matplotlib.axes import Axes

    from deszoo.bench.report import plot_scaling

    bars = []
    errorbar = Axes.errorbar
    monkeypatch.setattr(Axes, "errorbar",
                        lambda self, x, y, yerr=None, **kw: bars.append(yerr)
                        or errorbar(self, x, y, yerr=yerr, **kw))
    result = json.loads(LEADERBOARD_ENTRY.read_text())
    path = plot_scaling(result, tmp_path / "p.png")
    assert path.stat().st_size > 10_000
    assert len(bars) >= 2 * len(result["settings"]["modes"]) * len(result["works"])
    lows, highs = zip(*((lo, hi) for b in bars for lo, hi in zip(*b, strict=True)),
                      strict=True)
    assert min(lows) >= 0 and min(highs) >= 0 and max(highs) > 0


def test_progress_units_add_up():
    """The progress callback advances by total_units in all, failed rows included."""
    from deszoo.bench.runner import total_units

    def flaky(work, mode, num_envs, num_workers):
        if mode == "roundrobin":
            raise RuntimeError("boom")
        return open_session(work, mode, num_envs, num_workers)

    m = Matrix(scenarios=[SCENARIO], modes=["serial", "roundrobin"], num_envs=[2], **TINY)
    done = []
    run_matrix(m, progress=lambda advance, description: done.append(advance),
               open_session=flaky)
    assert sum(done) == pytest.approx(total_units(m)) and total_units(m) == 2 * (0.2 + 2)


# ---- leaderboard ---------------------------------------------------------------------------
def test_leaderboard_rejects_other_work_and_ranks_standard_work(tiny_result, tmp_path):
    (tmp_path / "other.json").write_text(json.dumps(tiny_result))
    (tmp_path / "good.json").write_text(json.dumps(as_standard(tiny_result)))
    broken = as_standard(tiny_result)
    del broken["rows"][1]["mode"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    (tmp_path / "junk.json").write_text("{")
    entries, rejected = leaderboard.load(tmp_path)
    assert [e.path.name for e in entries] == ["good.json"]
    why = {r.path.name: " ".join(r.errors) for r in rejected}
    assert "env_steps 48 (standard: 8192)" in why["other.json"]
    assert "differs from the leaderboard's" in why["other.json"]
    assert "missing field 'mode'" in why["broken.json"]
    assert "not readable JSON" in why["junk.json"]
    page = leaderboard.render(entries)
    assert f"## {SCENARIO} / small" in page and page.count("[good](") == len(MODES)
    rates = [r["env_steps_per_s"] for r, _ in leaderboard.ranking(entries)[(SCENARIO, "small")]]
    assert rates == sorted(rates, reverse=True)


def test_leaderboard_cli(tiny_result, tmp_path, capsys):
    d = tmp_path / "lb"
    d.mkdir()
    out = tmp_path / "leaderboard.md"
    (d / "good.json").write_text(json.dumps(as_standard(tiny_result)))
    assert main(["leaderboard", "--dir", str(d), "--out", str(out)]) == 0
    assert main(["leaderboard", "--dir", str(d), "--out", str(out), "--check"]) == 0
    (d / "other.json").write_text(json.dumps(tiny_result))
    assert main(["leaderboard", "--dir", str(d), "--out", str(out)]) == 1
    assert "other.json: rejected" in capsys.readouterr().err
    assert main(["leaderboard", "--dir", str(d), "--out", str(out), "--skip-invalid"]) == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    capsys.readouterr()
    assert main(["leaderboard", "--dir", str(empty), "--out", str(tmp_path / "e.md")]) == 1
    err = capsys.readouterr().err
    assert "no result files (*.json)" in err and "deszoo bench --standard --out" in err
    assert not (tmp_path / "e.md").exists()


def test_leaderboard_names_the_code_of_every_entry(tiny_result, tmp_path):
    """New entries show version and commit, a deszoo.bench/1 entry says it recorded none."""
    new = as_standard(tiny_result)
    new["commit"] = "abc1234+dirty"
    wheel = copy.deepcopy(new)
    wheel["commit"] = "unknown"
    for name, result in (("new", new), ("old", as_schema_1(new)), ("wheel", wheel)):
        (tmp_path / f"{name}.json").write_text(json.dumps(result))
    entries, rejected = leaderboard.load(tmp_path)
    assert not rejected and len(entries) == 3
    page = leaderboard.render(entries)
    version = new["deszoo_version"]
    cells = {"new": f"| {version} @ abc1234+dirty |", "old": f"| {version}, commit not recorded |",
             "wheel": f"| {version}, commit unknown |"}
    lines = page.splitlines()
    for name, cell in cells.items():
        ranked = [line for line in lines if f"[{name}](" in line]
        assert len(ranked) == len(MODES) and all(cell in line for line in ranked)
        (listed,) = [line for line in lines if line.startswith(f"| {name} |")]
        assert cell in listed
    real = tmp_path / "real"  # a real /1 entry, as the leaderboard published it
    real.mkdir()
    shutil.copy(LEADERBOARD_ENTRY, real)
    entries, rejected = leaderboard.load(real)
    assert not rejected and len(entries) == 1
    assert leaderboard.render(entries).count("| 0.1.0, commit not recorded |") == 113


def test_committed_leaderboard_is_valid_and_up_to_date():
    """Every committed entry passes, and docs/leaderboard.md is what they render to."""
    d = ROOT / "benchmarks" / "leaderboard"
    entries, rejected = leaderboard.load(d)
    assert not rejected, "\n".join(r.message() for r in rejected)
    out = ROOT / "docs" / "leaderboard.md"
    assert out.read_text() == leaderboard.render(entries), "run `deszoo leaderboard`"


# ---- autotune ------------------------------------------------------------------------------
def test_autotune_sweeps_workers_and_envs_per_worker():
    matrix = autotune_matrix(SCENARIO, env_steps=32)
    configs = autotune_configs(matrix, modes=["serial", "shm"], workers=[1, 2],
                               envs_per_worker=[1, 4])
    shm = {(c.num_workers, c.num_envs) for c in configs if c.mode == "shm"}
    assert shm == {(1, 1), (1, 4), (2, 2), (2, 8)}
    assert {c.num_envs for c in configs if c.mode == "serial"} == {1, 2, 4, 8}


def test_recommend_prefers_a_vector_env_and_says_when_serial_is_faster():
    rows = [
        {"status": "ok", "mode": "serial", "num_envs": 1, "num_workers": 0,
         "env_steps_per_s": 200.0, "scenario": "s", "preset": "p"},
        {"status": "ok", "mode": "roundrobin", "num_envs": 2, "num_workers": 0,
         "env_steps_per_s": 150.0, "scenario": "s", "preset": "p"},
    ]
    rec = recommend({"rows": rows})
    assert rec["fastest"] is rows[0] and rec["vector"] is rows[1]
    assert rec["snippet"] == ("deszoo.vector.make_vec('s', num_sims=2, backend='roundrobin', "
                              "env_kwargs={'preset': 'p'})")


def test_recommend_picks_the_fastest():
    rows = [
        {"status": "ok", "mode": "shm", "num_envs": 16, "num_workers": 2,
         "env_steps_per_s": 100.0, "scenario": "s", "preset": "p"},
        {"status": "ok", "mode": "shm", "num_envs": 4, "num_workers": 2,
         "env_steps_per_s": 97.0, "scenario": "s", "preset": "p"},
        {"status": "ok", "mode": "serial", "num_envs": 1, "num_workers": 0,
         "env_steps_per_s": 50.0, "scenario": "s", "preset": "p"},
    ]
    rec = recommend({"rows": rows})
    assert rec["fastest"] is rec["vector"] is rows[0] and rec["compact"] is rows[1]
    assert "num_sims=16" in rec["snippet"] and "num_workers=2" in rec["snippet"]


# ---- CLI and the pytest-benchmark suite ---------------------------------------------------
def test_cli_bench_tiny(tmp_path, capsys, monkeypatch):
    """`deszoo bench` on a tiny config prints the table, writes a valid JSON and a plot
    (``--plot`` without a file name: deszoo-bench.png)."""
    monkeypatch.chdir(tmp_path)
    out, plot = tmp_path / "r.json", tmp_path / "deszoo-bench.png"
    rc = main(["bench", "--scenarios", f"{SCENARIO}/small", "--modes", "serial,roundrobin",
               "--num-envs", "1,2", "--steps", "24", "--repeats", "1", "--no-progress",
               "--out", str(out), "--label", "ci", "--markdown", "--plot"])
    assert rc == 0
    printed, notes = capsys.readouterr()
    assert "| scenario | mode | envs |" in printed and "| flag |" in printed
    assert "docs/benchmarks.md" in printed
    assert "| jobshop_v0/small | roundrobin |" in printed
    # stdout is the Markdown alone; "wrote" lines and warnings go to stderr
    assert "wrote" not in printed and f"wrote {out}" in notes
    result = schema.check(json.loads(out.read_text()))
    assert [(r["mode"], r["num_envs"]) for r in result["rows"]] == [
        ("serial", 1), ("roundrobin", 1), ("serial", 2), ("roundrobin", 2)]
    assert result["machine"]["label"] == "ci" and result["command"].startswith("deszoo bench")
    assert plot.stat().st_size > 1000


def test_cli_autotune_tiny(capsys):
    """`deszoo bench --autotune` sweeps, prints the table and a make_vec recommendation."""
    modes = "serial,roundrobin" + (",shm" if "shm" in MODES else "")
    rc = main(["bench", "--autotune", SCENARIO, "--presets", "small", "--steps", "32",
               "--repeats", "1", "--workers", "1", "--envs-per-worker", "1,2",
               "--modes", modes, "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "recommended: deszoo.vector.make_vec('jobshop_v0', num_sims=" in out


def test_benchmark_suite_still_runs():
    """One tiny case of benchmarks/ (pytest-benchmark, timing disabled) in a subprocess."""
    env = {**os.environ, "DESZOO_BENCH_STEPS": "16", "DESZOO_BENCH_ENVS": "2",
           "DESZOO_BENCH_ROUNDS": "1", "DESZOO_BENCH_PRESET": "small"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/test_bench_sampling.py",
         "-k", f"{SCENARIO} and (serial or roundrobin)", "--benchmark-disable", "-q",
         "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r["rows"][3].update(env_steps_per_s=9.99e9),
     "env_steps_per_s 9990000000.0 is not the median of env_steps / wall_s"),
    (lambda r: r["rows"][3].update(env_steps_per_s=float("nan")), "env_steps_per_s nan"),
    (lambda r: r["rows"][3].update(wall_s=[-1.0] * len(r["rows"][3]["wall_s"])),
     "every wall time must be a positive number"),
    (lambda r: [row.update(speedup_vs_serial=999.0) for row in r["rows"]
                if row["mode"] != "serial"], "speedup_vs_serial 999.0 is not its rate"),
    (lambda r: r["machine"].update(load_average_start=[]), "load_average_start: expected"),
    (lambda r: r["machine"].update(load_average_end=["a", 1, 2]), "load_average_end: expected"),
])
def test_leaderboard_rejects_figures_that_do_not_follow_from_the_run(change, message,
                                                                      tmp_path):
    """A figure edited by hand (a rate, a speed-up, a load) is refused with the reason, not
    ranked first or crashing the page."""
    result = json.loads(LEADERBOARD_ENTRY.read_text())
    change(result)
    (tmp_path / "edited.json").write_text(json.dumps(result))
    entries, rejected = leaderboard.load(tmp_path)
    assert not entries and message in " ".join(rejected[0].errors), rejected[0].errors


def test_leaderboard_takes_a_result_once_and_links_it_from_the_page(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    shutil.copy(LEADERBOARD_ENTRY, d / "a.json")
    shutil.copy(LEADERBOARD_ENTRY, d / "b.json")
    entries, rejected = leaderboard.load(d)
    assert [e.path.name for e in entries] == ["a.json"]
    assert rejected[0].errors == ["the same result as a.json (each run once)"]
    page = leaderboard.render(entries, tmp_path / "pages" / "board.md")
    assert "[a](../mine/a.json)" in page  # where the entry is, from the page's folder
