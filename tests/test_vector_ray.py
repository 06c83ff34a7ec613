"""The ``ray`` backend: the shared vector suite on a local Ray, and its faults.

One Ray for the whole module (``ray.init(num_cpus=2)``, about 4 s here); skipped when Ray is
not installed. The shared tests of ``test_vector.py`` are imported and run here with the
``backend`` fixture below, so the ray backend passes exactly the suite the others pass.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import deszoo
from deszoo.errors import (
    ConfigError,
    ResetNeededError,
    SubEnvError,
    VectorEnvError,
    WorkerDiedError,
    WorkerTimeoutError,
)
from deszoo.vector import make_vec
from deszoo.vector.testing import ToyEnv, assert_same_rollouts, legal_last, rollout

ray = pytest.importorskip("ray")

# The shared suite, collected again here under this module's ``backend`` fixture.
from test_vector import (  # noqa: E402
    scenario_kwargs,
    test_bad_actions_raise_before_sending,
    test_dead_agents_keep_the_batch_shape,
    test_env_i_gets_seed_plus_i,
    test_interface,
    test_masked_action_is_a_sub_env_error,
    test_next_step_autoreset,
    test_reset_seeds_and_reproducible_autoresets,
    test_same_step_autoreset_matches_next_step,
)

SHARED = (
    test_bad_actions_raise_before_sending,
    test_dead_agents_keep_the_batch_shape,
    test_env_i_gets_seed_plus_i,
    test_interface,
    test_masked_action_is_a_sub_env_error,
    test_next_step_autoreset,
    test_reset_seeds_and_reproducible_autoresets,
    test_same_step_autoreset_matches_next_step,
)
# Each vector env costs its actors' start-up (about 1 s here): the suite runs on 2 actors.
RAY = {"ray2": dict(backend="ray", num_workers=2)}
pytestmark = pytest.mark.usefixtures("local_ray")


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module (ours: shut down at the end)."""
    if ray.is_initialized():  # someone else's: use it, leave it
        yield
        return
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(params=sorted(RAY))
def backend(request):
    return RAY[request.param]


def toy(**kwargs):
    return functools.partial(ToyEnv, **kwargs)


def step_n(vec, infos, n):
    for _ in range(n):
        *_, infos = vec.step(legal_last(infos["action_mask"]))
    return infos


def assert_gone(pids: list[int], within: float = 10.0) -> None:
    """Every actor process has exited (Ray's raylet reaps them) within ``within`` s."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not [p for p in pids if _running(p)]:
            return
        time.sleep(0.05)
    raise AssertionError(f"ray actor processes still there: {[p for p in pids if _running(p)]}")


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_shared_suite_is_imported():
    """The imported shared tests are the ones ``test_vector.py`` runs (none renamed away)."""
    assert all(fn.__module__ == "test_vector" for fn in SHARED)


@pytest.mark.parametrize("scenario", deszoo.list_envs())
@pytest.mark.parametrize("mode", ["NextStep", "SameStep"])
def test_ray_bit_identical_to_roundrobin(scenario, mode):
    """Same seed, same actions: ray gives roundrobin's bytes on every scenario, across
    autoresets (5 envs on 2 actors: an uneven split)."""
    kwargs = scenario_kwargs(scenario)
    ref = make_vec(scenario, 5, backend="roundrobin", seed=11, autoreset_mode=mode, **kwargs)
    vec = make_vec(scenario, 5, backend="ray", num_workers=2, seed=11, autoreset_mode=mode,
                   **kwargs)
    try:
        want, got = rollout(ref, 60), rollout(vec, 60)
    finally:
        vec.close()
        ref.close()
    assert sum(int((s["term"] | s["trunc"]).any()) for s in want[1:]) > 0
    assert_same_rollouts(want, got, f"{scenario} {mode} roundrobin vs ray")


def test_actors_split_envs_and_use_the_running_ray():
    vec = make_vec(toy(), 5, backend="ray", num_workers=2)
    try:
        assert vec.num_workers == 2 and not vec.started_ray
        assert [a.count for a in vec._actors] == [3, 2]
        pids = vec.worker_pids()
        assert len(set(pids)) == 2 and os.getpid() not in pids
        assert len(vec.worker_nodes()) == 2
    finally:
        vec.close()
    assert_gone(pids)
    with pytest.warns(UserWarning, match="already initialised"):
        make_vec(toy(), 1, backend="ray", num_workers=1, address="auto").close()


def test_ray_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="async"):
        make_vec(toy(), 2, backend="ray", batch_size=1)
    with pytest.raises(ConfigError, match="start_method"):
        make_vec(toy(), 2, backend="ray", start_method="spawn")
    with pytest.raises(ConfigError, match="ray"):
        make_vec(toy(), 2, backend="shm", address="auto")


def test_env_exception_names_env_with_traceback():
    """An exception in env 2 raises SubEnvError at the step that caused it; reset recovers."""
    vec = make_vec(toy(fail_at=3, fail_seed=12), 4, seed=10, backend="ray", num_workers=2)
    try:
        _, infos = vec.reset()
        infos = step_n(vec, infos, 2)
        with pytest.raises(SubEnvError) as err:
            vec.step(legal_last(infos["action_mask"]))
        e = err.value
        assert e.env_index == 2 and e.error_type == "ValueError"
        assert "env 2" in str(e) and "toy failure at step 3" in str(e)
        assert "step_arrays" in e.worker_traceback and "ValueError" in e.worker_traceback
        with pytest.raises(ResetNeededError):
            vec.step(legal_last(infos["action_mask"]))
        _, infos = vec.reset(seed=50)
        step_n(vec, infos, 3)
    finally:
        vec.close()


@pytest.mark.parametrize("how", ["idle", "mid-step"])
def test_dead_actor_is_a_worker_died_error(how):
    """SIGKILL an idle actor, or one that exits while stepping: WorkerDiedError, fast."""
    opts = dict(fail_at=2, fail_kind="exit", fail_seed=1) if how == "mid-step" else {}
    vec = make_vec(toy(**opts), 4, backend="ray", num_workers=2, timeout=20.0)
    pids = vec.worker_pids()
    try:
        _, infos = vec.reset()
        if how == "idle":
            os.kill(pids[1], signal.SIGKILL)
            time.sleep(0.1)
        else:
            infos = step_n(vec, infos, 1)
        start = time.monotonic()
        with pytest.raises(WorkerDiedError, match="died") as err:
            vec.step(legal_last(infos["action_mask"]))
        assert ("envs 2..3" if how == "idle" else "envs 0..1") in str(err.value)
        assert time.monotonic() - start < 10.0
        with pytest.raises(VectorEnvError):
            vec.reset()
    finally:
        vec.close()
    assert_gone(pids)


def test_hung_actor_times_out():
    """An actor that never answers raises WorkerTimeoutError; close() does not wait for it."""
    vec = make_vec(toy(fail_at=2, fail_kind="hang", hang_s=60.0), 2, backend="ray",
                   num_workers=2, timeout=0.5)
    pids = vec.worker_pids()
    try:
        _, infos = vec.reset()
        infos = step_n(vec, infos, 1)
        start = time.monotonic()
        with pytest.raises(WorkerTimeoutError, match="timeout"):
            vec.step(legal_last(infos["action_mask"]))
        assert time.monotonic() - start < 5.0
    finally:
        start = time.monotonic()
        vec.close()
        assert time.monotonic() - start < 5.0
    assert_gone(pids)


def test_restart_after_env_exception():
    """on_error="restart": the failed env is rebuilt in its actor, reported truncated."""
    vec = make_vec(toy(fail_at=3, fail_seed=11), 4, seed=10, backend="ray", num_workers=2,
                   on_error="restart")
    ref = make_vec(toy(), 4, seed=10, backend="roundrobin")
    try:
        pids = vec.worker_pids()
        _, infos = vec.reset()
        ref.reset()
        for _ in range(3):
            acts = legal_last(infos["action_mask"])
            obs, rew, term, trunc, infos = vec.step(acts)
            ref_obs, *_ = ref.step(acts)
        hit = slice(3, 6)  # env 1 only: the actor itself is fine
        assert infos["restarted"][hit].all() and trunc[hit].all()
        assert not infos["live"][hit].any() and (obs[hit] == 0).all()
        assert not infos["restarted"][:3].any() and not infos["restarted"][6:].any()
        np.testing.assert_array_equal(obs[6:], ref_obs[6:])
        obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
        assert not infos["restarted"].any() and infos["live"][hit].all()
        assert not trunc[hit].any() and (rew[hit] == 0).all()
        step_n(vec, infos, 10)
        assert vec.worker_pids() == pids
    finally:
        vec.close()
        ref.close()


def test_restart_after_sigkill_exit_and_hang():
    """on_error="restart": a killed idle actor, one exiting mid-step and a hung one are
    replaced; their envs report truncated, the others' results stay."""
    vec = make_vec(toy(fail_at=2, fail_kind="exit", fail_seed=13), 4, seed=10,
                   backend="ray", num_workers=2, on_error="restart", timeout=20.0)
    old = vec.worker_pids()
    try:
        _, infos = vec.reset()
        os.kill(old[0], signal.SIGKILL)
        time.sleep(0.1)
        obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
        assert infos["restarted"][:6].all() and trunc[:6].all()
        assert not infos["restarted"][6:].any()
        assert vec.worker_pids()[0] != old[0]
        # Env 3 (actor 1) exits at its second step: now.
        obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
        assert infos["restarted"][6:].all() and not infos["restarted"][:6].any()
        assert vec.worker_pids()[1] != old[1]
        step_n(vec, infos, 10)
        pids = vec.worker_pids()
    finally:
        vec.close()
    assert_gone(old + pids)

    vec = make_vec(toy(fail_at=2, fail_kind="hang", fail_seed=12, hang_s=60.0), 4, seed=10,
                   backend="ray", num_workers=2, on_error="restart", timeout=0.5)
    ref = make_vec(toy(), 4, seed=10, backend="roundrobin")
    try:
        _, infos = vec.reset()
        ref.reset()
        for _ in range(2):
            acts = legal_last(infos["action_mask"])
            obs, rew, term, trunc, infos = vec.step(acts)
            ref_obs, *_ = ref.step(acts)
        assert infos["restarted"][6:].all() and trunc[6:].all()
        assert not infos["restarted"][:6].any()
        np.testing.assert_array_equal(obs[:6], ref_obs[:6])
        step_n(vec, infos, 5)
    finally:
        vec.close()
        ref.close()


def test_restart_when_an_actor_dies_before_reset():
    """on_error="restart": an actor killed before reset is replaced and its reset redone."""
    vec = make_vec(toy(), 4, seed=10, backend="ray", num_workers=2, on_error="restart",
                   timeout=20.0)
    ref = make_vec(toy(), 4, seed=10, backend="roundrobin")
    old = vec.worker_pids()
    try:
        os.kill(old[1], signal.SIGKILL)
        time.sleep(0.1)
        obs, infos = vec.reset()
        ref_obs, _ = ref.reset()
        np.testing.assert_array_equal(obs, ref_obs)
        assert not infos["restarted"].any()
        assert vec.worker_pids()[0] == old[0] and vec.worker_pids()[1] != old[1]
        step_n(vec, infos, 3)
    finally:
        vec.close()
        ref.close()


def test_restarted_runs_are_reproducible():
    """Same seed, same faults: the rebuilt envs' new episodes are the same every run."""
    runs = []
    for _ in range(2):
        vec = make_vec(toy(fail_at=3, fail_seed=11), 4, seed=10, backend="ray",
                       num_workers=2, on_error="restart")
        try:
            runs.append(rollout(vec, 15, policy="last"))
        finally:
            vec.close()
    assert_same_rollouts(runs[0], runs[1], "two restarted runs")


def test_close_is_idempotent_and_kills_the_actors():
    """close() twice, after a fault: the actors are gone; a closed env refuses calls."""
    vec = make_vec(toy(fail_at=4), 3, backend="ray", num_workers=2)
    pids = vec.worker_pids()
    _, infos = vec.reset()
    infos = step_n(vec, infos, 3)
    with pytest.raises(SubEnvError):
        vec.step(legal_last(infos["action_mask"]))
    vec.close()
    vec.close()
    assert vec.closed
    with pytest.raises(VectorEnvError, match="closed"):
        vec.step(np.zeros(9, dtype=np.int64))
    assert_gone(pids)
    assert ray.is_initialized()  # the test's Ray is not shut down by close()


def test_unclosed_vec_env_is_collected():
    import gc

    vec = make_vec(toy(), 2, backend="ray", num_workers=2)
    vec.reset()
    pids = vec.worker_pids()
    del vec
    gc.collect()
    assert_gone(pids)


def test_interrupted_step_is_finished_by_the_next_call():
    """A step interrupted while waiting (Ctrl-C) is applied; the next call goes on from it."""
    vec = make_vec(toy(), 4, seed=1, backend="ray", num_workers=2)
    ref = make_vec(toy(), 4, seed=1, backend="roundrobin")
    try:
        _, infos = vec.reset()
        ref.reset()
        acts = legal_last(infos["action_mask"])
        original = vec._gather

        def interrupted(refs):
            vec._pending = refs
            raise KeyboardInterrupt

        vec._gather = interrupted
        with pytest.raises(KeyboardInterrupt):
            vec.step(acts)
        vec._gather = original
        *_, ref_infos = ref.step(acts)
        acts = legal_last(ref_infos["action_mask"])
        np.testing.assert_array_equal(vec.step(acts)[0], ref.step(acts)[0])
        obs, _ = vec.reset(seed=3)
        np.testing.assert_array_equal(obs, ref.reset(seed=3)[0])
    finally:
        vec.close()
        ref.close()


def test_make_vec_starts_ray_and_the_script_exits():
    """Without an initialised Ray, make_vec starts one (left running after close());
    a script that never closes its vec env still exits promptly."""
    script = textwrap.dedent(
        """
        import ray
        from deszoo.vector import make_vec

        vec = make_vec("jobshop_v0", 2, backend="ray", num_workers=2, preset="small")
        assert vec.started_ray and ray.is_initialized()
        vec.reset()
        vec.close()
        assert ray.is_initialized()
        keep = make_vec("jobshop_v0", 2, backend="ray", num_workers=1, preset="small")
        assert not keep.started_ray
        keep.reset()
        print("ok")
        """
    )
    env = dict(os.environ, RAY_ADDRESS="local")  # a fresh Ray, whatever this machine runs
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=90, env=env,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().endswith("ok")
    assert time.monotonic() - start < 60


def test_sb3_adapter():
    """``to_sb3`` on a ray vector env passes the SB3 adapter's test (if SB3 is installed)."""
    pytest.importorskip("stable_baselines3")
    from test_vector_sb3 import test_sb3_interface

    test_sb3_interface("ray")


def test_missing_ray_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'deszoo\[ray\]'"):
        make_vec(toy(), 2, backend="ray")
