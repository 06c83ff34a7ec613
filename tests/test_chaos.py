"""Chaos on every backend (deszoo.vector.chaos): random faults, every result row checked
against an undisturbed replay, no hang, no process or /dev/shm entry left behind.

The longer run is ``python benchmarks/chaos.py``; these are short, bounded ones, and tests
that the harness itself fails when a backend is wrong.
"""

from __future__ import annotations

import logging

import pytest
from conftest import HAS_RAY

from deszoo.vector import base as vec_base
from deszoo.vector.chaos import ChaosConfig, ChaosReport, run_chaos
from deszoo.vector.shm import ShmVecEnv

# name: make_vec options, steps, harness faults
RUNS = {
    "roundrobin": (dict(backend="roundrobin", num_workers=1), 300, 24),
    "supersuit0": (dict(backend="supersuit", num_workers=0), 200, 16),
    "shm2": (dict(backend="shm", num_workers=2), 240, 18),
    "shm2-spawn": (dict(backend="shm", num_workers=2, options={"start_method": "spawn"}), 60,
                   4),
    "supersuit2": (dict(backend="supersuit", num_workers=2), 200, 15),
}
if HAS_RAY:
    # Ray is slow to replace an actor: a short run, and no SIGSTOP (a timeout of seconds).
    RUNS["ray2"] = (dict(backend="ray", num_workers=2, timeout=5.0, kinds=("sigkill", "sigint")),
                    24, 2)


@pytest.fixture(autouse=True)
def quiet():
    """Restarts log a warning each; a chaos run has many."""
    logger = logging.getLogger("deszoo")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def explain(rep: ChaosReport) -> str:
    return rep.summary() + "\n" + "\n".join(rep.notes[:10])


@pytest.mark.parametrize("name", sorted(RUNS))
def test_chaos(name, backend_opts):
    """Faults of every kind at random steps, in restart and raise mode: every row of every
    step is the replay's, nothing hangs, nothing is left behind."""
    opts, steps, faults = RUNS[name]
    backend_opts(opts)  # starts Ray for the ray backend
    cfg = ChaosConfig(num_envs=5, steps=steps, faults=faults, seed=11, raise_rate=0.01,
                      exit_rate=0.003, segment_steps=steps // 2, **opts)
    rep = run_chaos(cfg)
    assert rep.ok, explain(rep)
    kinds = set(cfg.kinds)
    if cfg.backend == "roundrobin" or cfg.num_workers == 0:
        kinds = {"sigint"}
    assert kinds <= set(rep.faults), explain(rep)
    assert rep.faults["sigint"] >= 1 and rep.segments >= 2
    if cfg.steps >= 200:
        assert rep.faults["env_raise"] >= 1, explain(rep)


def small(**kwargs) -> ChaosConfig:
    opts = dict(backend="shm", num_workers=2, num_envs=4, steps=40, faults=8, seed=3,
                raise_rate=0.02, exit_rate=0.0, segment_steps=40)
    opts.update(kwargs)
    return ChaosConfig(**opts)


def test_harness_sees_a_wrong_restart_seed(monkeypatch):
    """The harness fails a backend whose rebuilt envs do not start the documented episode."""
    monkeypatch.setattr(vec_base, "restart_seed", lambda seed, k: seed + k)
    rep = run_chaos(small(kinds=("sigkill",), on_error="restart"))
    assert rep.divergent_rows > 0 and "divergent rows" in rep.notes[0]
    assert not (rep.hangs or rep.leaked_processes or rep.leaked_shm)


def test_harness_sees_a_fault_spill_over_to_other_envs(monkeypatch):
    """... and one where a fault changes the rows of an env it did not hit."""
    mark = vec_base.DeszooVecEnv._mark_restarted

    def spill(self, sims, reset_now):
        mark(self, sorted(set(sims) | {0}), reset_now)

    monkeypatch.setattr(vec_base.DeszooVecEnv, "_mark_restarted", spill)
    rep = run_chaos(small(kinds=("sigkill",), raise_rate=0.0, on_error="restart", seed=5))
    assert rep.faults["sigkill"] == 8
    assert rep.divergent_rows > 0


def test_harness_sees_processes_left_behind(monkeypatch):
    """... and one whose close leaves its workers running."""
    monkeypatch.setattr(ShmVecEnv, "_shutdown", lambda self: None)
    rep = run_chaos(small(kinds=("sigint",), faults=2, steps=10))
    assert rep.leaked_processes >= 2 and rep.divergent_rows == 0


def test_harness_sees_a_hang():
    """A stopped worker that the vector env never gives up on (a long timeout) is a hang
    for the watchdog, not a blocked test; the stopped process is not left behind."""
    rep = run_chaos(small(kinds=("sigstop",), faults=1, steps=2, timeout=600.0, watchdog=2.0,
                          raise_rate=0.0))
    assert rep.hangs == 1 and "hung" in rep.notes[0]
    assert rep.leaked_processes == 0 and not rep.leaked_shm
