"""The step-cost scripts of benchmarks/ run and report what their tables say (seconds)."""

from __future__ import annotations

import os
import shutil

import pytest

import bridge  # benchmarks/ is on pytest's pythonpath (pyproject.toml)
import interleave
import step_cost
import vector_cost


def test_bridge_reports_the_dict_floor_beside_both_apis():
    results = bridge.measure(steps=50, repeats=1)
    for n in bridge.AGENTS:
        for what in ("raw", "arrays", "dict", "floor"):
            assert results[f"{what}_{n}"] > 0.0
    text = bridge.table({"t": results})
    assert "lowest dict / arrays" in text and text.count("| t |") == len(bridge.AGENTS)
    # a tree whose copy of bridge.py had no floor column still prints
    old = {k: v for k, v in results.items() if not k.startswith("floor")}
    assert "| - |" in bridge.table({"old": old})


def test_step_cost_table_in_instructions():
    results = {"a": {"x_v0/small/arrays": 2000.0}, "b": {"x_v0/small/arrays": 1000.0}}
    text = step_cost.table(results, "instructions")
    assert "a instructions" in text and "2,000" in text and "2.00x" in text


@pytest.mark.skipif(shutil.which("valgrind") is None or not os.environ.get("DESZOO_VALGRIND"),
                    reason="needs valgrind and DESZOO_VALGRIND=1 (minutes: four interpreters "
                           "under callgrind)")
def test_step_cost_counts_instructions_per_step():
    out = step_cost.instructions([("loadbalance_v0", "small")], steps=5, seed=0)
    assert set(out) == {"loadbalance_v0/small/arrays", "loadbalance_v0/small/dict"}
    assert 1_000 < out["loadbalance_v0/small/arrays"] < out["loadbalance_v0/small/dict"]


def test_interleave_times_three_ways_of_the_same_work():
    rows = interleave.measure("loadbalance_v0/small", [1, 2], steps=20, repeats=1)
    assert [r["envs"] for r in rows] == [1, 2] and rows[1]["steps_per_env"] == 10
    for r in rows:
        assert all(r[m] > 0.0 for m in interleave.MODES)
    text = interleave.table("w", rows)
    assert text.count("\n| 1 | 20 |") == 1 and "roundrobin / interleaved" in text


def test_vector_cost_times_the_plain_loop_and_roundrobin():
    results = vector_cost.measure(steps=16, repeats=1)
    assert set(results) == {f"{m}_{n}" for m in vector_cost.MODES for n in vector_cost.ENVS}
    assert all(v > 0.0 for v in results.values())
    text = vector_cost.table({"t": results})
    assert text.count("| t |") == len(vector_cost.ENVS) and "rr adds per vector step" in text
