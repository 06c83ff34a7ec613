"""Sampling speed of every scenario in every mode, as pytest-benchmark cases.

Each case builds the envs (or starts the workers) once, warms up, then times
``rounds`` runs of the same seeded work (``DESZOO_BENCH_STEPS`` env steps over
``DESZOO_BENCH_ENVS`` envs), each from a fresh ``reset(seed)`` done outside the timing.
One round is one run of the whole work: env-steps/s = ``extra_info["env_steps"] / mean``.
"""

from __future__ import annotations

import math

import pytest

from deszoo.bench.modes import available_modes, is_in_process, open_session
from deszoo.bench.runner import available_scenarios
from deszoo.bench.work import Work

SCENARIOS = available_scenarios()
MODES = available_modes()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sampling(benchmark, bench_settings, scenario, mode):
    s = bench_settings
    work = Work(scenario, s["preset"], env_steps=s["env_steps"])
    workers = 0 if is_in_process(mode) else s["num_workers"]
    benchmark.group = f"{scenario}/{s['preset']}"
    session = open_session(work, mode, s["num_envs"], workers or None)
    try:
        session.reset()
        session.run(math.ceil(session.steps_per_env / 10))  # warm-up
        stats = []
        benchmark.extra_info.update(
            work_hash=work.hash,
            env_steps=session.steps_per_env * s["num_envs"],
            num_envs=s["num_envs"],
            num_workers=workers,
            n_agents=session.n_agents,
        )

        def one_run():
            stats.append(session.run())

        benchmark.pedantic(one_run, setup=session.reset, rounds=s["rounds"])
        assert stats and stats[-1].env_steps == session.steps_per_env * s["num_envs"]
    finally:
        session.close()
