"""Faults of the vector backends: env errors, killed and hung workers, restarts, cleanup."""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from deszoo.errors import (
    ResetNeededError,
    SubEnvError,
    VectorEnvError,
    WorkerDiedError,
    WorkerTimeoutError,
)
from deszoo.vector import make_vec
from deszoo.vector.testing import ToyEnv, legal_last

PROCESS_BACKENDS = {
    "supersuit2": dict(backend="supersuit", num_workers=2),
    "shm2": dict(backend="shm", num_workers=2),
}
ALL_BACKENDS = {
    "roundrobin": dict(backend="roundrobin"),
    "supersuit0": dict(backend="supersuit", num_workers=0),
    **PROCESS_BACKENDS,
}


def toy(**kwargs):
    return functools.partial(ToyEnv, **kwargs)


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def assert_gone(pids: list[int], within: float = 10.0) -> None:
    """Every pid is reaped (no longer a child of ours) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = {p.pid for p in multiprocessing.active_children()} & set(pids)
        if not alive and not any(os.path.exists(f"/proc/{pid}") and _ours(pid) for pid in pids):
            return
        time.sleep(0.05)
    raise AssertionError(f"worker processes still there: {pids}")


def _ours(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid()
    except (OSError, ValueError, IndexError):
        return False


def step_n(vec, infos, n):
    for _ in range(n):
        *_, infos = vec.step(legal_last(infos["action_mask"]))
    return infos


@pytest.mark.parametrize("name", sorted(ALL_BACKENDS))
def test_env_exception_names_env_with_traceback(name):
    """An exception in env 2 raises SubEnvError in the parent at the step that caused it."""
    vec = make_vec(toy(fail_at=3, fail_seed=12), 4, seed=10, **ALL_BACKENDS[name])
    try:
        _, infos = vec.reset()
        infos = step_n(vec, infos, 2)
        with pytest.raises(SubEnvError) as err:
            vec.step(legal_last(infos["action_mask"]))
        e = err.value
        assert e.env_index == 2 and e.error_type == "ValueError"
        assert "env 2" in str(e) and "toy failure at step 3" in str(e)
        assert "step_arrays" in e.worker_traceback and "ValueError" in e.worker_traceback
        if name != "supersuit2":
            with pytest.raises(ResetNeededError):
                vec.step(legal_last(infos["action_mask"]))
            _, infos = vec.reset(seed=50)  # a reset recovers
            step_n(vec, infos, 3)
        else:
            with pytest.raises(VectorEnvError):
                vec.step(legal_last(infos["action_mask"]))
    finally:
        vec.close()


@pytest.mark.parametrize("name", sorted(PROCESS_BACKENDS))
def test_sigkilled_worker_is_detected(name):
    """SIGKILL a worker: the next call raises WorkerDiedError well within the timeout."""
    vec = make_vec(toy(), 4, timeout=20.0, **PROCESS_BACKENDS[name])
    pids = vec.worker_pids()
    try:
        _, infos = vec.reset()
        os.kill(pids[1], signal.SIGKILL)
        time.sleep(0.1)
        start = time.monotonic()
        with pytest.raises(WorkerDiedError, match="died"):
            vec.step(legal_last(infos["action_mask"]))
        assert time.monotonic() - start < 10.0
        with pytest.raises(VectorEnvError):
            vec.reset()
    finally:
        vec.close()
    assert_gone(pids)


def test_worker_exit_mid_step_is_detected():
    """A worker that dies while stepping (not idle) is seen through its sentinel."""
    vec = make_vec(toy(fail_at=2, fail_kind="exit", fail_seed=1), 4, backend="shm",
                   num_workers=2, timeout=20.0)
    pids = vec.worker_pids()
    try:
        _, infos = vec.reset()
        infos = step_n(vec, infos, 1)
        with pytest.raises(WorkerDiedError, match="exit code 7"):
            vec.step(legal_last(infos["action_mask"]))
    finally:
        vec.close()
    assert_gone(pids)


@pytest.mark.parametrize("name", sorted(PROCESS_BACKENDS))
def test_hung_worker_times_out(name):
    """A worker that never answers raises WorkerTimeoutError; close() does not wait for it."""
    vec = make_vec(toy(fail_at=2, fail_kind="hang", hang_s=60.0), 2, timeout=0.5,
                   **PROCESS_BACKENDS[name])
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


@pytest.mark.parametrize("name", ["roundrobin", "shm2"])
def test_restart_after_env_exception(name):
    """on_error="restart": the failed env is rebuilt, reported truncated, sampling goes on."""
    vec = make_vec(toy(fail_at=3, fail_seed=11), 4, seed=10, on_error="restart",
                   **ALL_BACKENDS[name])
    try:
        _, infos = vec.reset()
        infos = step_n(vec, infos, 2)
        obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
        # Env 1 failed; shm rebuilds its whole worker (envs 0 and 1).
        hit = slice(0, 6) if name == "shm2" else slice(3, 6)
        assert infos["restarted"][hit].all() and trunc[hit].all()
        assert not infos["live"][hit].any() and (obs[hit] == 0).all()
        assert not infos["restarted"][6:].any()
        obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
        assert not infos["restarted"].any() and infos["live"][hit].all()
        assert not trunc[hit].any() and (rew[hit] == 0).all()
        step_n(vec, infos, 20)
    finally:
        vec.close()


def test_restart_after_sigkill_and_mid_step_exit():
    """shm restart: a killed idle worker and a worker dying mid-step are both rebuilt."""
    vec = make_vec(toy(fail_at=2, fail_kind="exit", fail_seed=13), 4, seed=10,
                   backend="shm", num_workers=2, on_error="restart", timeout=20.0)
    old = vec.worker_pids()
    try:
        _, infos = vec.reset()
        os.kill(old[0], signal.SIGKILL)
        time.sleep(0.1)
        obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
        assert infos["restarted"][:6].all() and trunc[:6].all()
        assert not infos["restarted"][6:].any()
        assert vec.worker_pids()[0] != old[0]
        # Env 3 (worker 1) exits at its second step: now.
        obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
        assert infos["restarted"][6:].all() and not infos["restarted"][:6].any()
        assert vec.worker_pids()[1] != old[1]
        step_n(vec, infos, 20)
        pids = vec.worker_pids()
    finally:
        vec.close()
    assert_gone(old + pids)


@pytest.mark.parametrize("name", sorted(ALL_BACKENDS) + ["shm-spawn"])
def test_close_is_idempotent_and_leaves_nothing(name):
    """close() twice, after steps and after a fault: no child, no shared-memory segment."""
    opts = dict(ALL_BACKENDS.get(name, dict(backend="shm", num_workers=2,
                                            start_method="spawn")))
    before = shm_entries()
    vec = make_vec(toy(fail_at=4), 3, **opts)
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
    assert shm_entries() <= before


def test_unclosed_vec_env_is_collected():
    """Dropping the last reference to an unclosed vec env stops its workers."""
    import gc

    vec = make_vec(toy(), 2, backend="shm", num_workers=2)
    vec.reset()
    pids = vec.worker_pids()
    del vec
    gc.collect()
    assert_gone(pids)


def test_interpreter_exit_with_unclosed_vec_envs():
    """A script that never closes its vec envs still exits promptly (fork and spawn)."""
    script = textwrap.dedent(
        """
        from deszoo.vector import make_vec

        if __name__ == "__main__":
            keep = [
                make_vec("jobshop_v0", 2, backend="shm", num_workers=2, preset="small"),
                make_vec("jobshop_v0", 2, backend="shm", num_workers=2, preset="small",
                         start_method="spawn"),
                make_vec("jobshop_v0", 2, backend="supersuit", num_workers=2, preset="small"),
            ]
            for vec in keep:
                vec.reset()
            print("ok")
        """
    )
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    assert time.monotonic() - start < 30


def test_restart_after_hang():
    """shm restart: a worker that hangs past the timeout is replaced; the others' results stay."""
    vec = make_vec(toy(fail_at=2, fail_kind="hang", fail_seed=12, hang_s=60.0), 4, seed=10,
                   backend="shm", num_workers=2, on_error="restart", timeout=0.5)
    ref = make_vec(toy(), 4, seed=10, backend="roundrobin")
    try:
        _, infos = vec.reset()
        _, ref_infos = ref.reset()
        for _ in range(2):
            acts = legal_last(infos["action_mask"])
            obs, rew, term, trunc, infos = vec.step(acts)
            ref_obs, *_ = ref.step(acts)
        # Env 2 hung on its second step: worker 1 (envs 2, 3) was rebuilt.
        assert infos["restarted"][6:].all() and trunc[6:].all()
        assert not infos["restarted"][:6].any()
        np.testing.assert_array_equal(obs[:6], ref_obs[:6])
        step_n(vec, infos, 5)
    finally:
        vec.close()
        ref.close()


def test_interrupted_step_is_finished_by_the_next_call():
    """A step interrupted while waiting (Ctrl-C) does not confuse the next one."""
    vec = make_vec(toy(), 4, seed=1, backend="shm", num_workers=2)
    ref = make_vec(toy(), 4, seed=1, backend="roundrobin")
    try:
        _, infos = vec.reset()
        ref.reset()
        acts = legal_last(infos["action_mask"])
        original = vec._wait_sync
        vec._wait_sync = lambda: (_ for _ in ()).throw(KeyboardInterrupt)
        with pytest.raises(KeyboardInterrupt):
            vec.step(acts)
        vec._wait_sync = original
        *_, ref_infos = ref.step(acts)
        acts = legal_last(ref_infos["action_mask"])
        # The next step first waits for the interrupted one, then runs its own.
        np.testing.assert_array_equal(vec.step(acts)[0], ref.step(acts)[0])
        obs, infos = vec.reset(seed=3)
        np.testing.assert_array_equal(obs, ref.reset(seed=3)[0])
    finally:
        vec.close()
        ref.close()
