"""Tests of deszoo.scores: interval, work hash, schema, committed entries, page, command."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

import deszoo
from deszoo.bench.work import work_hash
from deszoo.cli import main
from deszoo.policies import evaluate, heuristic_policy
from deszoo.scores import (
    SCORED,
    SEEDS,
    load,
    render,
    score,
    score_work,
    t_interval,
    t_quantile,
    validate,
    write_docs,
)

ROOT = Path(__file__).resolve().parent.parent
ENTRIES = ROOT / "benchmarks" / "scores"
SMALL = ("loadbalance_v0", "small")


@pytest.mark.parametrize(("df", "expected"), [(1, 12.7062), (4, 2.7764), (19, 2.0930),
                                              (100, 1.9840), (10**6, 1.9600)])
def test_t_quantile_matches_the_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-4)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=1e-4)


def test_t_interval_is_centred_and_widens_with_spread():
    lo, hi = t_interval([1.0, 2.0, 3.0, 4.0])
    assert (lo + hi) / 2 == pytest.approx(2.5)
    assert hi - lo == pytest.approx(2 * 3.1824 * np.std([1, 2, 3, 4], ddof=1) / 2, rel=1e-4)
    assert t_interval([1.0, 2.0, 3.0, 40.0])[1] - t_interval([1.0, 2.0, 3.0, 40.0])[0] > hi - lo
    with pytest.raises(ValueError, match="at least 2"):
        t_interval([1.0])


def test_work_hash_changes_with_the_work_only():
    """Another preset, scenario parameter, seed list or scenario is other work; spelling a
    preset's own value again is not."""
    base = work_hash(score_work(*SMALL))
    assert work_hash(score_work(*SMALL, load=0.9)) == base  # the small preset's load
    others = [score_work(SMALL[0], "default"), score_work(*SMALL, load=0.8),
              score_work(*SMALL, invalid_penalty=0.5), score_work(*SMALL, seeds=SEEDS[:3]),
              score_work("jobshop_v0", "small")]
    hashes = {work_hash(w) for w in others}
    assert base not in hashes and len(hashes) == len(others)


@pytest.fixture(scope="module")
def entry() -> dict:
    """A real entry: the heuristic on three held-out seeds."""
    return score(heuristic_policy(SMALL[0]), *SMALL, name="heuristic", seeds=SEEDS[:3],
                 source="builtin:heuristic", command="pytest")


def test_an_entry_is_valid_and_holds_the_evaluation(entry):
    assert validate(entry) == []
    expected = evaluate(heuristic_policy(SMALL[0]), SMALL[0], SEEDS[:3], preset=SMALL[1])
    np.testing.assert_allclose(entry["returns"], expected)
    assert entry["deszoo_version"] == deszoo.__version__ and entry["version"] == 0


@pytest.mark.parametrize(("change", "message"), [
    (lambda e: e.pop("returns"), "missing field returns"),
    (lambda e: e.update(mean=e["mean"] + 1), "is not the mean of returns"),
    (lambda e: e.update(ci95=[e["ci95"][0] - 1, e["ci95"][1]]), "is not the 95% t-interval"),
    (lambda e: e["work"]["config"].update(load=0.5), "is not the hash of work"),
    (lambda e: e.update(preset="default"), "differs from work.preset"),
    (lambda e: e["returns"].pop(), "2 returns for 3 seeds"),
    (lambda e: e.update(training={"algorithm": "x", "timesteps": "many", "wall_s": 1.0}),
     "training.timesteps is str"),
    (lambda e: e.update(schema="deszoo.scores/0"), "schema 'deszoo.scores/0'"),
    (lambda e: e.update(note=["loops"]), "note is list"),
    (lambda e: e.update(training={"algorithm": "x", "timesteps": 1, "wall_s": -5.0}),
     "training.wall_s -5.0 must be a positive number"),
])
def test_validate_names_what_is_wrong(entry, change, message):
    bad = copy.deepcopy(entry)
    change(bad)
    assert any(message in err for err in validate(bad)), validate(bad)


def test_load_takes_only_the_standard_work(entry, tmp_path):
    """An entry on other seeds is valid but not comparable: the page leaves it out."""
    (tmp_path / "few.json").write_text(json.dumps(entry))
    (tmp_path / "broken.json").write_text("{")
    entries, rejected = load(tmp_path)
    assert entries == []
    why = {p.name: " ".join(errs) for p, errs in rejected}
    assert "is not the standard work's" in why["few.json"]
    assert "not readable JSON" in why["broken.json"]


def test_committed_entries_are_valid_and_cover_every_scenario():
    """Every entry in benchmarks/scores/ passes the schema and is on the standard work;
    every scenario and preset has its random and heuristic baselines and MaskablePPO, and
    the small presets the hand-written loop."""
    entries, rejected = load(ENTRIES)
    assert rejected == [], rejected
    have = {(e.data["scenario"], e.data["preset"], e.data["policy"]) for e in entries}
    for name in SCORED:
        for preset in ("small", "default"):
            for policy in ("random", "heuristic", "MaskablePPO"):
                assert (name, preset, policy) in have, (name, preset, policy)
        assert (name, "small", "PPO-loop") in have, name
    for e in entries:
        t = e.data["training"]
        assert (t is None) == (e.data["policy"] in ("random", "heuristic")), e.path.name
        assert t is None or t["timesteps"] > 0 and t["wall_s"] > 0, e.path.name


def test_scores_page_is_generated_from_the_entries():
    """docs/scores.md is what ``python -m deszoo.scores --docs`` writes (no drift)."""
    assert write_docs(ENTRIES, ROOT / "docs" / "scores.md", check=True) == []


def test_training_page_shows_the_hyperparameters_of_the_training_script():
    """The table in docs/training.md is what benchmarks/train_baselines.py trains with."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_baselines",
                                                  ROOT / "benchmarks" / "train_baselines.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    table = module.hyperparameter_table()
    assert table in (ROOT / "docs" / "training.md").read_text(), table


def test_a_note_is_marked_in_its_cell_and_printed_under_the_table(entry):
    noted = dict(copy.deepcopy(entry), note="worse than random; the greedy cars loop.")
    assert validate(noted) == []
    page = render([type("E", (), {"path": Path("x.json"), "data": noted})()])
    assert f"{noted['mean']:.1f} ± " in page and " (1) |" in page
    assert "1. `loadbalance_v0` small, heuristic: worse than random; the greedy" in page


def test_page_lists_every_entry_with_its_interval(entry):
    page = render([type("E", (), {"path": Path("x.json"), "data": entry})()])
    lo, hi = entry["ci95"]
    assert f"{entry['mean']:.1f} ± {(hi - lo) / 2:.1f}" in page
    assert f"[{lo:.1f}, {hi:.1f}]" in page and entry["work_hash"] in page


# ---- the command ------------------------------------------------------------------------
def test_cli_scores_writes_a_valid_entry(tmp_path, capsys):
    argv = ["scores", "heuristic", SMALL[0], "--preset", SMALL[1], "--seeds", "3",
            "--out", str(tmp_path)]
    assert main(argv) == 0
    path = tmp_path / "loadbalance_v0-small-heuristic.json"
    written = json.loads(path.read_text())
    assert validate(written) == []
    assert written["seeds"] == list(SEEDS[:3]) and written["training"] is None
    assert written["command"] == "deszoo " + " ".join(argv)
    out = capsys.readouterr().out
    assert f"mean return {written['mean']:.2f}" in out and str(path) in out
    assert main(argv) == 2  # it exists: not replaced without --force
    assert "pass --force" in capsys.readouterr().err
    assert main([*argv, "--force"]) == 0


def test_cli_scores_a_callable_policy(tmp_path, monkeypatch, capsys):
    """MODULE:ATTR names a batched policy; the first legal action of every row."""
    (tmp_path / "my_policy.py").write_text(
        "import numpy as np\n\ndef first_legal(obs, mask):\n    return mask.argmax(axis=1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["scores", "my_policy:first_legal", "jobshop_v0", "--preset", "small", "--seeds",
            "2", "--out", str(tmp_path), "--label", "first-legal"]
    assert main(argv) == 0
    written = json.loads((tmp_path / "jobshop_v0-small-first-legal.json").read_text())
    assert validate(written) == [] and written["source"] == "callable:my_policy:first_legal"
    expected = evaluate(lambda o, m: m.argmax(axis=1), "jobshop_v0", SEEDS[:2], preset="small")
    np.testing.assert_allclose(written["returns"], expected)


def test_cli_scores_a_saved_sb3_model(tmp_path, capsys):
    """A saved MaskablePPO model scores as its greedy masked policy; timesteps from the zip."""
    pytest.importorskip("sb3_contrib", reason="needs sb3-contrib: pip install -e '.[sb3]'")
    import torch
    from sb3_contrib import MaskablePPO

    from deszoo.vector import make_vec, to_sb3

    env = to_sb3(make_vec(SMALL[0], 2, backend="roundrobin", seed=0,
                          autoreset_mode="SameStep", preset=SMALL[1]))
    model = MaskablePPO("MlpPolicy", env, n_steps=16, batch_size=32, n_epochs=1, seed=0,
                        device="cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the command does; many threads crawl on a busy machine
    try:
        model.learn(64)
    finally:
        env.close()
    model.save(tmp_path / "tiny.zip")
    argv = ["scores", str(tmp_path / "tiny.zip"), SMALL[0], "--preset", SMALL[1], "--seeds",
            "2", "--out", str(tmp_path), "--train-wall", "1.5"]
    assert main(argv) == 0
    written = json.loads((tmp_path / "loadbalance_v0-small-tiny.json").read_text())
    assert validate(written) == []
    assert written["training"]["timesteps"] == model.num_timesteps
    assert written["training"]["wall_s"] == 1.5

    def greedy(obs, mask):
        return model.predict(obs, action_masks=mask, deterministic=True)[0]

    try:
        expected = evaluate(greedy, SMALL[0], SEEDS[:2], preset=SMALL[1])
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_allclose(written["returns"], expected)
    # Without --train-wall the entry is valid too (wall_s null, "-" on the page); a model of
    # another scenario is a one-line error, not a traceback mid-score.
    argv = argv[:-2] + ["--force"]
    assert main(argv) == 0
    written = json.loads((tmp_path / "loadbalance_v0-small-tiny.json").read_text())
    assert written["training"]["wall_s"] is None and validate(written) == []
    capsys.readouterr()
    assert main(["scores", str(tmp_path / "tiny.zip"), "jobshop_v0", "--preset", "small",
                 "--seeds", "2", "--out", str(tmp_path)]) == 2
    assert "a model of another scenario or preset?" in capsys.readouterr().err
