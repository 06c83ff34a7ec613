"""Benchmark harness: how fast can a scenario be sampled here, and with which backend?

A run matrix of scenarios x presets x modes x ``num_envs`` x ``num_workers``, where the
modes are ``serial`` (the naive loop) and every backend of :mod:`deszoo.vector`. Each row
does the same seeded work, is warmed up and repeated, and reports medians and spread.
Results follow a versioned schema (:mod:`deszoo.bench.schema`) and feed the leaderboard
(:mod:`deszoo.bench.leaderboard`). The command line is ``deszoo bench`` and
``deszoo leaderboard``; see ``docs/benchmarks.md``.

Example::

    from deszoo.bench import Matrix, run_matrix
    result = run_matrix(Matrix(scenarios=["jobshop_v0"], num_envs=[8], num_workers=[2]))
    for row in result["rows"]:
        print(row["mode"], row["env_steps_per_s"])
"""

from __future__ import annotations

from deszoo.bench.autotune import autotune_configs, autotune_matrix, recommend
from deszoo.bench.machine import machine_record
from deszoo.bench.modes import available_modes, open_session
from deszoo.bench.runner import (
    Config,
    Matrix,
    available_scenarios,
    quick_matrix,
    run_matrix,
    standard_matrix,
    total_units,
)
from deszoo.bench.schema import SCHEMA, SchemaError, check, validate
from deszoo.bench.work import Work, standard_work

__all__ = [
    "SCHEMA",
    "Config",
    "Matrix",
    "SchemaError",
    "Work",
    "autotune_configs",
    "autotune_matrix",
    "available_modes",
    "available_scenarios",
    "check",
    "machine_record",
    "open_session",
    "quick_matrix",
    "recommend",
    "run_matrix",
    "standard_matrix",
    "standard_work",
    "total_units",
    "validate",
]
