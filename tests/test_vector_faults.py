"""Faults of the vector backends: env errors, killed and hung workers, restarts, cleanup."""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from conftest import HAS_RAY
from deszoo.errors import (
    SubEnvError,
    VectorEnvError,
    WorkerDiedError,
    WorkerTimeoutError,
)
from deszoo.rollouts import assert_same_rollouts, legal_last, rollout
from deszoo.vector import make_vec
from devkit.toyenv import ToyEnv

PROCESS_BACKENDS = {
    "supersuit2": dict(backend="supersuit", num_workers=2),
    "shm2": dict(backend="shm", num_workers=2),
}
if HAS_RAY:
    PROCESS_BACKENDS["ray2"] = dict(backend="ray", num_workers=2)
    # One node actor whose shm pool has 2 workers (the session's Ray has one 2-CPU node).
    PROCESS_BACKENDS["raynode"] = dict(backend="ray", per_node=True)
ALL_BACKENDS = {
    "roundrobin": dict(backend="roundrobin"),
    "supersuit0": dict(backend="supersuit", num_workers=0),
    **PROCESS_BACKENDS,
}


def toy(**kwargs):
    return functools.partial(ToyEnv, **kwargs)


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def assert_no_new_shm(before: set[str], within: float = 2.0) -> None:
    """No /dev/shm entry beyond ``before`` stays. Any process on the machine that makes a
    multiprocessing lock under fork shows a ``sem.mp-*`` name for a moment (sem_open, then
    sem_unlink; tens of ms on a loaded machine), so a new name must last ``within`` s to
    count: what this process leaves behind does."""
    deadline = time.monotonic() + within
    while not shm_entries() <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert shm_entries() <= before, f"left in /dev/shm: {sorted(shm_entries() - before)}"


def assert_gone(pids: list[int], within: float = 10.0) -> None:
    """Every worker process has exited within ``within`` seconds (ours reaped; Ray's actors
    reaped by their raylet)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = {p.pid for p in multiprocessing.active_children()} & set(pids)
        if not alive and not [p for p in pids if _running(p)]:
            return
        time.sleep(0.05)
    raise AssertionError(f"worker processes still there: {[p for p in pids if _running(p)]}")


def _running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def step_n(vec, infos, n):
    for _ in range(n):
        *_, infos = vec.step(legal_last(infos["action_mask"]))
    return infos


@pytest.mark.parametrize("name", sorted(ALL_BACKENDS))
def test_env_exception_names_env_with_traceback(name, backend_opts):
    """An exception in env 2 raises SubEnvError at the step that caused it; the env is
    rebuilt (its rows truncated), the others' results come with the error, the run goes on."""
    vec = make_vec(toy(fail_at=3, fail_seed=12), 4, seed=10,
                   **backend_opts(ALL_BACKENDS[name]))
    ref = make_vec(toy(), 4, seed=10, backend="roundrobin")
    try:
        _, infos = vec.reset()
        ref.reset()
        for _ in range(2):
            acts = legal_last(infos["action_mask"])
            *_, infos = vec.step(acts)
            ref.step(acts)
        acts = legal_last(infos["action_mask"])
        with pytest.raises(SubEnvError) as err:
            vec.step(acts)
        e = err.value
        assert e.env_index == 2 and e.error_type == "ValueError"
        assert "env 2" in str(e) and "toy failure at step 3" in str(e)
        assert "step_arrays" in e.worker_traceback and "ValueError" in e.worker_traceback
        obs, rew, term, trunc, infos = e.results
        ref_obs, ref_rew, *_ = ref.step(acts)
        hit = slice(6, 9)
        assert infos["restarted"][hit].all() and trunc[hit].all()
        assert not infos["restarted"][:6].any() and not infos["restarted"][9:].any()
        for rows in (slice(0, 6), slice(9, 12)):
            np.testing.assert_array_equal(obs[rows], ref_obs[rows])
            np.testing.assert_array_equal(rew[rows], ref_rew[rows])
        step_n(vec, infos, 3)  # no reset needed
    finally:
        vec.close()
        ref.close()


@pytest.mark.parametrize("name", sorted(PROCESS_BACKENDS))
def test_sigkilled_worker_is_detected(name, backend_opts):
    """SIGKILL a worker: the next call raises WorkerDiedError well within the timeout, with
    the other worker's results; the dead worker is replaced and the run goes on."""
    vec = make_vec(toy(), 4, seed=3, timeout=20.0, **backend_opts(PROCESS_BACKENDS[name]))
    ref = make_vec(toy(), 4, seed=3, backend="roundrobin")
    pids = vec.worker_pids()
    try:
        _, infos = vec.reset()
        ref.reset()
        os.kill(pids[1], signal.SIGKILL)
        time.sleep(0.1)
        start = time.monotonic()
        acts = legal_last(infos["action_mask"])
        with pytest.raises(WorkerDiedError, match="died") as err:
            vec.step(acts)
        assert time.monotonic() - start < 10.0
        obs, rew, term, trunc, infos = err.value.results
        ref_obs, *_ = ref.step(acts)
        np.testing.assert_array_equal(obs[:6], ref_obs[:6])
        assert infos["restarted"][6:].all() and trunc[6:].all()
        assert not infos["restarted"][:6].any()
        assert vec.worker_pids()[1] != pids[1]
        step_n(vec, infos, 3)
        new = vec.worker_pids()
    finally:
        vec.close()
        ref.close()
    assert_gone(pids + new)


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
        new = vec.worker_pids()
    finally:
        vec.close()
    assert_gone(pids + new)


@pytest.mark.parametrize("name", sorted(PROCESS_BACKENDS))
def test_hung_worker_times_out(name, backend_opts):
    """A worker that never answers raises WorkerTimeoutError and is replaced; close() does
    not wait for anything."""
    vec = make_vec(toy(fail_at=2, fail_kind="hang", hang_s=60.0, fail_seed=1), 2, timeout=0.5,
                   seed=0, **backend_opts(PROCESS_BACKENDS[name]))
    pids = vec.worker_pids()
    try:
        _, infos = vec.reset()
        infos = step_n(vec, infos, 1)
        start = time.monotonic()
        with pytest.raises(WorkerTimeoutError, match="timeout"):
            vec.step(legal_last(infos["action_mask"]))
        assert time.monotonic() - start < 5.0
        assert vec.worker_pids()[1] != pids[1]
        new = vec.worker_pids()
    finally:
        start = time.monotonic()
        vec.close()
        assert time.monotonic() - start < 5.0
    assert_gone(pids + new)


@pytest.mark.parametrize("name", sorted(ALL_BACKENDS))
def test_restart_after_env_exception(name, backend_opts):
    """on_error="restart": the failed env is rebuilt, reported truncated, sampling goes on."""
    vec = make_vec(toy(fail_at=3, fail_seed=11), 4, seed=10, on_error="restart",
                   **backend_opts(ALL_BACKENDS[name]))
    try:
        _, infos = vec.reset()
        infos = step_n(vec, infos, 2)
        obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
        # Env 1 failed: it alone is rebuilt (env 0 shares its worker and goes on).
        hit = slice(3, 6)
        assert infos["restarted"][hit].all() and trunc[hit].all()
        assert not infos["live"][hit].any() and (obs[hit] == 0).all()
        assert not infos["restarted"][6:].any()
        obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
        assert not infos["restarted"].any() and infos["live"][hit].all()
        assert not trunc[hit].any() and (rew[hit] == 0).all()
        step_n(vec, infos, 20)
    finally:
        vec.close()


# shm2 only: with a roundrobin case here, the Ray actors of later tests in the same session
# stopped booting (2026-12-07; not understood yet, see benchmarks/NOTES.md).
@pytest.mark.parametrize("name", ["shm2"])
def test_same_step_restart_reports_zeros_for_the_lost_episode(name, backend_opts):
    """SameStep: a rebuilt env's final_obs and final_info are zeros (the lost episode's last
    values went with it), not those of an episode that ended earlier."""
    vec = make_vec(toy(fail_at=2, fail_episode=2, fail_seed=11), 4, seed=10,
                   on_error="restart", autoreset_mode="SameStep",
                   **backend_opts(ALL_BACKENDS[name]))
    hit = slice(3, 6)  # env 1's rows
    try:
        _, infos = vec.reset()
        ended = False
        for _ in range(200):
            _, _, _, trunc, infos = vec.step(legal_last(infos["action_mask"]))
            if infos["restarted"][hit].any():
                break
            ended |= bool(infos["_final_obs"][hit].all())
        else:
            pytest.fail("env 1 never failed")
        assert ended  # its first episode ended, so final_info once held its values
        assert trunc[hit].all() and infos["_final_obs"][hit].all()
        assert (infos["final_obs"][hit] == 0).all()
        assert (infos["final_info"]["sim_time"][hit] == 0).all()
        assert (infos["final_info"]["invalid_count"][hit] == 0).all()
    finally:
        vec.close()


@pytest.mark.parametrize("name", sorted(PROCESS_BACKENDS))
def test_set_attributes_survive_a_replaced_worker(name, backend_opts):
    """Values given with set_attr or call_envs("set") are given again to the envs of a
    worker that was replaced (they were lost with its process)."""
    vec = make_vec(toy(), 4, seed=10, on_error="restart", timeout=20.0,
                   **backend_opts(PROCESS_BACKENDS[name]))
    try:
        _, infos = vec.reset()
        vec.set_attr("max_steps", [1000, 1000, 7, 7])
        vec.call_envs("set", "max_steps", [1], values=[5])
        os.kill(vec.worker_pids()[0], signal.SIGKILL)
        time.sleep(0.1)
        _, _, _, _, infos = vec.step(legal_last(infos["action_mask"]))
        assert infos["restarted"][:6].all()
        assert vec.get_attr("max_steps") == (1000, 5, 7, 7)
    finally:
        vec.close()


@pytest.mark.parametrize("name", sorted(PROCESS_BACKENDS))
def test_restart_after_sigkill_and_mid_step_exit(name, backend_opts):
    """Restart mode: a killed idle worker and a worker dying mid-step are both replaced."""
    vec = make_vec(toy(fail_at=2, fail_kind="exit", fail_seed=13), 4, seed=10,
                   on_error="restart", timeout=20.0, **backend_opts(PROCESS_BACKENDS[name]))
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


@pytest.mark.parametrize("name", sorted(PROCESS_BACKENDS))
def test_event_counts_survive_a_replaced_worker(name, backend_opts):
    """num_events() counts since the vector env was built: a replaced worker's envs go on
    from their counts (SuperSuit's started again from 0)."""
    vec = make_vec(toy(), 4, seed=10, on_error="restart", timeout=20.0,
                   **backend_opts(PROCESS_BACKENDS[name]))
    try:
        _, infos = vec.reset()
        infos = step_n(vec, infos, 3)
        before = vec.num_events()
        os.kill(vec.worker_pids()[0], signal.SIGKILL)
        time.sleep(0.1)
        step_n(vec, infos, 3)  # the restart, then the new episode's first steps
        assert (vec.num_events() > before).all(), (before, vec.num_events())
    finally:
        vec.close()


@pytest.mark.parametrize("name", sorted(PROCESS_BACKENDS))
def test_restart_when_a_worker_dies_before_reset(name, backend_opts):
    """A worker killed before the first reset is replaced and the reset goes through; a
    reset starts episodes anyway, so the results equal an undisturbed run's."""
    vec = make_vec(toy(), 4, seed=10, on_error="restart", timeout=20.0,
                   **backend_opts(PROCESS_BACKENDS[name]))
    ref = make_vec(toy(), 4, seed=10, backend="roundrobin")
    old = vec.worker_pids()
    try:
        os.kill(old[1], signal.SIGKILL)
        time.sleep(0.1)
        obs, infos = vec.reset()
        ref_obs, _ = ref.reset()
        np.testing.assert_array_equal(obs[:6], ref_obs[:6])
        assert infos["restarted"][6:].all() and vec.worker_pids()[1] != old[1]
        step_n(vec, infos, 3)
        pids = vec.worker_pids()
    finally:
        vec.close()
        ref.close()
    assert_gone(old + pids)


@pytest.mark.parametrize("name", sorted(ALL_BACKENDS))
def test_restarted_runs_are_reproducible(name, backend_opts):
    """Same seed, same faults: the rebuilt envs' new episodes are the same every run, and
    the same as on roundrobin."""
    runs = []
    for opts in (ALL_BACKENDS[name], ALL_BACKENDS["roundrobin"]):
        vec = make_vec(toy(fail_at=3, fail_seed=11), 4, seed=10, on_error="restart",
                       **backend_opts(opts))
        try:
            runs.append(rollout(vec, 15, policy="last"))
        finally:
            vec.close()
    assert_same_rollouts(runs[0], runs[1], f"{name} vs roundrobin, with a restart")


SPAWN_BACKENDS = {
    "shm-spawn": dict(backend="shm", num_workers=2, start_method="spawn"),
    # SuperSuit's shared observations had a lock: a named semaphore that stayed in
    # /dev/shm after close() under spawn and forkserver (until garbage collection).
    "supersuit-spawn": dict(backend="supersuit", num_workers=2, start_method="spawn"),
    "supersuit-forkserver": dict(backend="supersuit", num_workers=2,
                                 start_method="forkserver"),
}


@pytest.mark.parametrize("name", sorted(ALL_BACKENDS) + sorted(SPAWN_BACKENDS))
def test_close_is_idempotent_and_leaves_nothing(name, backend_opts):
    """close() twice, after steps and after a fault: no child, no shared-memory segment."""
    opts = backend_opts(ALL_BACKENDS.get(name) or SPAWN_BACKENDS[name])
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
    assert_no_new_shm(before)


@pytest.mark.parametrize("name", sorted(PROCESS_BACKENDS))
def test_unclosed_vec_env_is_collected(name, backend_opts):
    """Dropping the last reference to an unclosed vec env stops its workers."""
    import gc

    vec = make_vec(toy(), 2, **backend_opts(PROCESS_BACKENDS[name]))
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


@pytest.mark.parametrize("name", sorted(PROCESS_BACKENDS))
def test_restart_after_hang(name, backend_opts):
    """Restart mode: a worker that hangs past the timeout is replaced; the others' results
    stay."""
    vec = make_vec(toy(fail_at=2, fail_kind="hang", fail_seed=12, hang_s=60.0), 4, seed=10,
                   on_error="restart", timeout=0.5, **backend_opts(PROCESS_BACKENDS[name]))
    ref = make_vec(toy(), 4, seed=10, backend="roundrobin")
    try:
        _, infos = vec.reset()
        _, ref_infos = ref.reset()
        for _ in range(2):
            acts = legal_last(infos["action_mask"])
            obs, rew, term, trunc, infos = vec.step(acts)
            ref_obs, *_ = ref.step(acts)
        # Env 2 hung on its second step: worker 1 (envs 2, 3) was replaced.
        assert infos["restarted"][6:].all() and trunc[6:].all()
        assert not infos["restarted"][:6].any()
        np.testing.assert_array_equal(obs[:6], ref_obs[:6])
        step_n(vec, infos, 5)
    finally:
        vec.close()
        ref.close()


@pytest.mark.parametrize("name", sorted(ALL_BACKENDS))
def test_interrupted_step_is_finished_by_the_next_call(name, backend_opts):
    """A step interrupted while waiting (Ctrl-C) does not confuse the next one.
    (roundrobin's step has no wait: its envs step as it goes, with Ctrl-C held off until
    all have; one that comes then is raised as the results are copied out.)"""
    vec = make_vec(toy(), 4, seed=1, **backend_opts(ALL_BACKENDS[name]))
    ref = make_vec(toy(), 4, seed=1, backend="roundrobin")
    cut = "after" if name == "roundrobin" else "wait"
    try:
        _, infos = vec.reset()
        ref.reset()
        acts = legal_last(infos["action_mask"])

        def interrupted(point):
            if point == cut:  # Ctrl-C while the workers step
                vec.fault_hook = None
                raise KeyboardInterrupt

        vec.fault_hook = interrupted
        with pytest.raises(KeyboardInterrupt):
            vec.step(acts)
        *_, ref_infos = ref.step(acts)
        acts = legal_last(ref_infos["action_mask"])
        # The next step first waits for the interrupted one, then runs its own.
        np.testing.assert_array_equal(vec.step(acts)[0], ref.step(acts)[0])
        obs, infos = vec.reset(seed=3)
        np.testing.assert_array_equal(obs, ref.reset(seed=3)[0])
    finally:
        vec.close()
        ref.close()


def test_interrupted_hand_out_reaches_every_worker():
    """Issue 11, F3: a Ctrl-C while commands are handed out leaves no worker believed busy
    but never told (that was a WorkerTimeoutError, or a busy loop under restart)."""
    vec = make_vec(toy(), 4, seed=1, backend="shm", num_workers=2, timeout=5.0)
    ref = make_vec(toy(), 4, seed=1, backend="roundrobin")
    try:
        _, infos = vec.reset()
        ref.reset()
        acts = legal_last(infos["action_mask"])

        def interrupt_hand_out(point):
            if point == "handout":  # after the first worker's doorbell
                vec.fault_hook = None
                raise KeyboardInterrupt

        vec.fault_hook = interrupt_hand_out
        with pytest.raises(KeyboardInterrupt):
            vec.step(acts)
        *_, ref_infos = ref.step(acts)
        start = time.monotonic()
        acts = legal_last(ref_infos["action_mask"])
        np.testing.assert_array_equal(vec.step(acts)[0], ref.step(acts)[0])
        assert time.monotonic() - start < 2.0
    finally:
        vec.close()
        ref.close()


ORPHAN_SCRIPT = """
import sys, time
from deszoo.vector import make_vec

if __name__ == "__main__":
    backend, start_method = sys.argv[1], sys.argv[2]
    vec = make_vec("jobshop_v0", 2, backend=backend, num_workers=2, preset="small",
                   start_method=None if start_method == "default" else start_method)
    vec.reset()
    print(" ".join(map(str, vec.worker_pids())), flush=True)
    time.sleep(120)
"""


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (the fork server, the resource tracker, ...)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.append(int(entry))
    return out


@pytest.mark.parametrize("backend, start_method", [
    ("shm", "default"), ("shm", "spawn"), ("shm", "forkserver"), ("supersuit", "default"),
    ("supersuit", "forkserver"),
])
def test_stopped_workers_die_with_a_killed_parent(backend, start_method):
    """Issue 19: a SIGSTOPped worker outlived a SIGKILLed parent for good (state T, ppid 1).
    Workers now ask the kernel for SIGKILL when their parent dies (PR_SET_PDEATHSIG), which
    reaches a stopped process too; the idle one goes as well. Issue 37: under forkserver the
    worker's parent is the fork server, which a stopped worker kept alive (the worker, the
    fork server and the resource tracker were all there 10 minutes later); now every process
    the parent started goes with it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    proc = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT, backend, start_method], stdout=subprocess.PIPE,
        text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2, pids
        os.kill(pids[0], signal.SIGSTOP)
        deadline = time.monotonic() + 5.0
        while _state(pids[0]) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(pids[0]) == "T"
        helpers = _children(proc.pid)  # workers (fork, spawn), fork server, resource tracker
    finally:
        proc.kill()
        proc.wait()
    pids = sorted(set(pids) | set(helpers))
    deadline = time.monotonic() + 10.0
    left = pids
    while left and time.monotonic() < deadline:
        left = [p for p in pids if _state(p) not in (None, "Z", "X")]  # gone, or a zombie
        time.sleep(0.05)
    for p in left:  # clean up before failing
        os.kill(p, signal.SIGKILL)
    assert not left, f"workers {left} outlived their killed parent"


@pytest.mark.parametrize("name", sorted(PROCESS_BACKENDS))
def test_sigint_to_workers_changes_nothing(name, backend_opts):
    """Ctrl-C is the parent's (issue 19): a terminal's Ctrl-C reaches every process of its
    foreground group, workers included. A SIGINT to a worker, idle or in the middle of a
    step, changes nothing: no error, no restart, the same results as roundrobin (SuperSuit's
    workers used to restart their envs, Ray's to fail the step)."""
    vec = make_vec(toy(fail_at=2, fail_kind="hang", hang_s=0.6), 4, seed=3, timeout=30.0,
                   **backend_opts(PROCESS_BACKENDS[name]))
    ref = make_vec(toy(), 4, seed=3, backend="roundrobin")
    try:
        _, infos = vec.reset()
        ref.reset()
        pids = vec.worker_pids()
        targets = set(pids) | set(getattr(vec, "actor_pids", list)())
        for pid in targets:  # idle
            os.kill(pid, signal.SIGINT)
        acts = legal_last(infos["action_mask"])
        out = vec.step(acts)
        np.testing.assert_array_equal(out[0], ref.step(acts)[0])
        acts = legal_last(out[4]["action_mask"])
        # Mid-step: every env sleeps 0.6 s in its second step.
        timer = threading.Timer(0.3, lambda: [os.kill(p, signal.SIGINT) for p in targets])
        timer.start()
        out = vec.step(acts)
        timer.join()
        np.testing.assert_array_equal(out[0], ref.step(acts)[0])
        assert not out[4]["restarted"].any() and vec.worker_pids() == pids
    finally:
        vec.close()
        ref.close()


def test_worker_states_follow_their_table():
    """Each worker's state changes only along WORKER_NEXT: idle to a command, back to idle
    when its reply is taken; after every call every worker is idle, and in async mode the
    workers of the rows in flight are busy with STEP."""
    from deszoo.vector.pool import IDLE, WORKER_NEXT, Worker, WorkerState

    assert WORKER_NEXT[IDLE] == frozenset(set(WorkerState) - {IDLE})
    for s in WorkerState:
        if s is not IDLE:
            assert WORKER_NEXT[s] == {IDLE}
    w = Worker(0, 0, 1, 1)
    w.to(WorkerState.STEP)
    w.to(WorkerState.STEP)  # a hand-out done again keeps its state
    with pytest.raises(RuntimeError, match="no transition STEP -> CALL"):
        w.to(WorkerState.CALL)
    w.to(IDLE)
    assert not w.busy

    for backend, opts in (("roundrobin", {}), ("shm", {"num_workers": 2}),
                          ("supersuit", {"num_workers": 2})):
        vec = make_vec(ToyEnv, 4, backend=backend, **opts)
        try:
            vec.reset(seed=0)
            vec.step(np.zeros(vec.num_envs, dtype=np.int64))
            vec.get_attr("possible_agents")
            assert [w.state for w in vec.pool.workers] == [IDLE] * len(vec.pool.workers)
        finally:
            vec.close()
    vec = make_vec(ToyEnv, 4, backend="shm", num_workers=2, batch_size=2)
    try:
        vec.async_reset(seed=0)
        *_, infos = vec.recv()
        states = sorted(w.state.name for w in vec.pool.workers)
        assert states == ["IDLE", "RESET"] or states == ["IDLE", "IDLE"], states
        vec.send(np.zeros(len(infos["env_id"]), dtype=np.int64))
        assert WorkerState.STEP in {w.state for w in vec.pool.workers}
    finally:
        vec.close()


def test_supersuit_worker_lost_at_the_boot_handshake_is_a_worker_fault(monkeypatch):
    """A SuperSuit worker killed after it sent its env count, before the parent's answer
    reached it: the parent's send fails (a raw BrokenPipeError escaped before); now the
    worker counts as died while booting, which a first boot reports as a VectorEnvError
    naming the worker."""
    from multiprocessing.connection import Connection

    from deszoo.errors import VectorEnvError

    real_send = Connection.send
    left = [1]
    parent = os.getpid()

    def send(self, obj):
        # the parent's boot answer (the worker's first row); forked workers inherit this
        if isinstance(obj, int) and left[0] and os.getpid() == parent:
            left[0] -= 1
            raise BrokenPipeError(32, "Broken pipe")
        return real_send(self, obj)

    monkeypatch.setattr(Connection, "send", send)
    with pytest.raises(VectorEnvError, match="could not build its envs: .*its envs were lost"):
        make_vec(ToyEnv, 4, backend="supersuit", num_workers=2)
    assert left == [0]
