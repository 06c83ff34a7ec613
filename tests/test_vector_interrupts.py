"""Faults as users cause them (issue 37): Ctrl-C sent to the process while other threads run,
Ctrl-C during async ``recv``/``send``, and workers that hang in async mode."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from deszoo.errors import WorkerTimeoutError
from deszoo.rollouts import legal_last
from deszoo.vector import make_vec
from deszoo.vector.base import State

BACKENDS = {
    "roundrobin": dict(backend="roundrobin"),
    "shm": dict(backend="shm", num_workers=2),
    "supersuit": dict(backend="supersuit", num_workers=2),
}


class Spammer:
    """A thread that sends SIGINT to the whole process every ``every`` seconds, as a
    terminal's Ctrl-C does: the OS hands it to any thread that does not block it.

    The test's own code must not be cut, so Python's handler is replaced by one that raises
    ``KeyboardInterrupt`` only inside :meth:`call` (the vector env's call, the one under
    test), exactly as ``signal.default_int_handler`` does there."""

    def __init__(self, every: float = 0.002):
        self.every = every
        self.armed = False
        self.stop = threading.Event()
        self.quiet = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            if not self.quiet.is_set():
                os.kill(os.getpid(), signal.SIGINT)

    def _handler(self, signum, frame) -> None:
        if self.armed:
            raise KeyboardInterrupt

    def call(self, fn, *args):
        """``fn(*args)`` with Ctrl-C raised as usual."""
        self.armed = True
        try:
            return fn(*args)
        finally:
            self.armed = False

    def retry(self, fn, *args, tries: int = 20):
        """``fn(*args)`` until it returns without a KeyboardInterrupt; after ``tries``
        interrupted tries (a call slower than the spam, on a loaded machine), once more
        with the spam paused."""
        for _ in range(tries):
            try:
                return self.call(fn, *args)
            except KeyboardInterrupt:
                pass
        self.quiet.set()
        try:
            for _ in range(5):  # a SIGINT sent just before the pause may still land
                try:
                    return self.call(fn, *args)
                except KeyboardInterrupt:
                    time.sleep(0.01)
            raise AssertionError(f"{fn.__name__} interrupted with the spam paused")
        finally:
            self.quiet.clear()

    def __enter__(self) -> Spammer:
        self.old = signal.signal(signal.SIGINT, self._handler)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        signal.signal(signal.SIGINT, self.old)


@pytest.mark.filterwarnings("ignore::deszoo.errors.MasksIgnoredWarning")
@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_ctrl_c_from_another_thread_changes_no_trajectory(name):
    """A thread sends SIGINT to the process every 2 ms while the main thread steps. Each
    step is all or nothing: either every env stepped (its results may be lost) or none did,
    and every result that comes back equals an undisturbed run of the actions that were
    applied. (Before: 236 of 251 KeyboardInterrupts were raised inside an env's step, and
    roundrobin's trajectories diverged in 4 of 4 runs.) The actions are random, not read
    from masks that a lost result would leave stale; a masked one counts as invalid."""
    kw = dict(preset="small", **BACKENDS[name])
    vec = make_vec("jobshop_v0", 4, seed=5, timeout=20.0, **kw)
    rng = np.random.default_rng(0)
    n = vec.single_action_space.n
    got: list[tuple[int, np.ndarray, np.ndarray]] = []  # (steps applied, obs, rew) returned
    applied: list[np.ndarray] = []
    interrupts = 0
    try:
        vec.reset()
        with Spammer() as spam:
            # 150 tries, more until 21 results came back (a slow machine's steps are cut
            # more often: supersuit kept 15 of 150 on a 2-core EPYC VM)
            for tries in range(2000):
                if tries >= 150 and len(got) > 20:
                    break
                acts = rng.integers(0, n, vec.num_envs)
                before = vec.num_events()
                try:
                    obs, rew, _, _, _ = spam.call(vec.step, acts)
                except KeyboardInterrupt:
                    interrupts += 1
                    spam.retry(vec.get_attr, "possible_agents")  # ends the cut-short step
                    moved = vec.num_events() != before
                    assert moved.all() or not moved.any(), f"a batch stepped in part: {moved}"
                    if moved.any():
                        applied.append(acts)
                    continue
                applied.append(acts)
                got.append((len(applied), obs.copy(), rew.copy()))
    finally:
        vec.close()
    assert interrupts > 0, "no Ctrl-C landed: the test proved nothing"
    assert len(got) > 20
    ref = make_vec("jobshop_v0", 4, seed=5, backend="roundrobin", preset="small")
    try:
        ref.reset()
        want = {k: ref.step(acts)[:2] for k, acts in enumerate(applied, start=1)}
    finally:
        ref.close()
    for k, o, r in got:
        np.testing.assert_array_equal(o, want[k][0], err_msg=f"step {k}: observations")
        np.testing.assert_array_equal(r, want[k][1], err_msg=f"step {k}: rewards")


@pytest.mark.filterwarnings("ignore::deszoo.errors.MasksIgnoredWarning")
@pytest.mark.parametrize("name", ["shm", "supersuit"])
def test_ctrl_c_in_async_recv_and_send_loses_no_batch(name):
    """Async mode under a SIGINT every 2 ms: a ``recv()`` cut short leaves its batch to the
    next ``recv()`` (before: the state said RECEIVED with the rows never handed over, and
    the next recv raised "recv() twice"); a ``send()`` cut short either sent its actions
    (state SENT) or did not (state RECEIVED: send again). Each env's rows come back in the
    order of an undisturbed sync run with the same per-env actions."""
    vec = make_vec("jobshop_v0", 4, seed=2, batch_size=2, timeout=20.0, preset="small",
                   **BACKENDS[name])
    n_agents = vec.agents_per_sim
    seen: dict[int, list[np.ndarray]] = {e: [] for e in range(vec.num_sims)}
    interrupts = 0
    try:
        vec.async_reset()
        with Spammer() as spam:
            for _ in range(120):
                try:
                    obs, _, _, _, infos = spam.call(vec.recv)
                except KeyboardInterrupt:
                    interrupts += 1
                    assert vec.state is State.SENT, vec.state
                    obs, _, _, _, infos = spam.retry(vec.recv)
                rows = infos["env_id"]
                for e in np.unique(rows // n_agents):
                    seen[int(e)].append(obs[rows // n_agents == e].copy())
                acts = legal_last(infos["action_mask"])
                while True:
                    try:
                        spam.call(vec.send, acts)
                        break
                    except KeyboardInterrupt:
                        interrupts += 1
                        if vec.state is State.SENT:
                            break
                        assert vec.state is State.RECEIVED, vec.state
    finally:
        vec.close()
    assert interrupts > 0, "no Ctrl-C landed: the test proved nothing"
    ref = make_vec("jobshop_v0", 4, seed=2, backend="roundrobin", preset="small")
    try:
        obs, infos = ref.reset()
        want = [obs.reshape(4, n_agents, -1).copy()]
        for _ in range(max(len(v) for v in seen.values())):
            obs, _, _, _, infos = ref.step(legal_last(infos["action_mask"]))
            want.append(obs.reshape(4, n_agents, -1).copy())
    finally:
        ref.close()
    for e, got in seen.items():
        assert len(got) > 10
        for t, o in enumerate(got):
            np.testing.assert_array_equal(o, want[t][e], err_msg=f"env {e}, batch {t}")


@pytest.mark.parametrize("on_error", ["restart", "raise"])
@pytest.mark.parametrize("name", ["shm", "supersuit"])
def test_a_stopped_worker_is_found_in_async_mode(name, on_error):
    """Issue 37: with batch_size < num_envs, a stopped worker went unnoticed as long as
    another worker kept answering (771 batches from worker 1 in 8 s, worker 0's envs gone
    silently). Each worker now has its own deadline from when it got its command: it is
    replaced (or the error raised) within its timeout, as in sync mode."""
    vec = make_vec("jobshop_v0", 4, seed=0, batch_size=2, timeout=1.0, preset="small",
                   on_error=on_error, **BACKENDS[name])
    try:
        vec.async_reset()
        stopped = vec.worker_pids()[0]
        os.kill(stopped, signal.SIGSTOP)
        start = time.monotonic()
        found = None
        batches = 0
        while found is None and time.monotonic() - start < 10.0:
            try:
                obs, _, _, _, infos = vec.recv()
            except WorkerTimeoutError as exc:
                found = time.monotonic() - start
                obs, _, _, _, infos = exc.results
            else:
                if infos["restarted"].any():
                    found = time.monotonic() - start
            batches += 1
            vec.send(legal_last(infos["action_mask"]))
        assert found is not None, f"{batches} batches in 10 s and no restart"
        assert found < 1.0 + 3.0, found  # the timeout, and the restart's own time
        assert stopped not in vec.worker_pids()
        # the replacement's envs are in the batches again
        rows_of_0: set[int] = set()
        start = time.monotonic()
        while not rows_of_0 and time.monotonic() - start < 10.0:
            _, _, _, _, infos = vec.recv()
            rows_of_0 |= set(infos["env_id"][infos["env_id"] < 2 * vec.agents_per_sim])
            vec.send(legal_last(infos["action_mask"]))
        assert rows_of_0
    finally:
        try:
            os.kill(stopped, signal.SIGKILL)
        except (OSError, UnboundLocalError):
            pass
        vec.close()



def test_a_ctrl_c_between_the_barrier_calls_does_not_hang_the_next_step():
    """shm's hand-out takes and releases a private lock as its memory barrier. A Ctrl-C that
    landed between the two (seen in the chaos test, SIGINT from another thread) left the lock
    held, and every later hand-out blocked for ever in ``acquire`` (a signal does not break
    it). Now the next step goes on with a fresh lock. Run in a child process so that a
    regression fails on the timeout instead of hanging the test run."""
    code = textwrap.dedent("""
        from deszoo.vector import make_vec
        vec = make_vec("jobshop_v0", 4, backend="shm", num_workers=2, preset="small")
        _, infos = vec.reset(seed=0)
        assert vec.transport.barrier.acquire()  # held, as the cut pair left it
        for _ in range(3):
            _, _, _, _, infos = vec.step(infos["action_mask"].argmax(axis=1))
        print(vec.state.name)
        vec.close()
    """)
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("a step after a cut barrier pair hung (60 s)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "READY"


def run_after_cut(vec, ref, infos: dict, steps: int = 3) -> dict:
    """``steps`` steps of ``vec`` and ``ref`` with the same actions: equal results, and no
    env restarted. Returns the last infos."""
    for _ in range(steps):
        acts = legal_last(infos["action_mask"])
        obs, rew, _, _, infos = vec.step(acts)
        want = ref.step(acts)
        assert not infos["restarted"].any()
        np.testing.assert_array_equal(obs, want[0])
        np.testing.assert_array_equal(rew, want[1])
    return infos


@pytest.mark.filterwarnings("ignore::deszoo.errors.MasksIgnoredWarning")
@pytest.mark.parametrize("call", ["get_attr", "reset"])
def test_ctrl_c_again_while_a_hand_out_is_done_again_sends_every_argument(call):
    """``shm`` hands a command out again in full when a Ctrl-C cut the hand-out short. A
    second Ctrl-C (a terminal's come in bursts, and the chaos harness's thread sends them
    every few hundred microseconds) cut that redo short too: the workers had their command
    but never its arguments, waited for them until ``timeout``, and were replaced, their
    envs restarted without any row saying so (the chaos run's 9 divergent rows: a whole
    worker's envs in a new episode the replay knew nothing of). Now the redo holds Ctrl-C
    off: the next call finishes the cut-short one with the same workers."""
    vec = make_vec("jobshop_v0", 4, seed=4, backend="shm", num_workers=2, timeout=20.0,
                   preset="small", on_error="restart")
    ref = make_vec("jobshop_v0", 4, seed=4, backend="roundrobin", preset="small")
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    left = {"cuts": 2}

    def ctrl_c(point):
        if point == "handout" and left["cuts"]:  # worker 0 has its command, worker 1 not
            left["cuts"] -= 1
            signal.raise_signal(signal.SIGINT)

    try:
        _, infos = vec.reset()
        ref.reset()
        run_after_cut(vec, ref, infos, steps=2)
        generations = [w.generation for w in vec.pool.workers]
        vec.fault_hook = ctrl_c
        with pytest.raises(KeyboardInterrupt):
            if call == "reset":
                vec.reset(seed=9)
            else:
                vec.get_attr("possible_agents")
        vec.fault_hook = None
        assert left["cuts"] == 0, "the hand-out was not done again"
        assert vec.state is State.INTERRUPTED
        assert vec.get_attr("possible_agents") == ref.get_attr("possible_agents")
        assert [w.generation for w in vec.pool.workers] == generations, "workers replaced"
        if call == "reset":  # the cut-short reset happened: its results were dropped
            _, infos = ref.reset(seed=9)
        run_after_cut(vec, ref, infos)
    finally:
        signal.signal(signal.SIGINT, old)
        vec.close()
        ref.close()


@pytest.mark.filterwarnings("ignore::deszoo.errors.MasksIgnoredWarning")
def test_a_step_whose_hand_out_is_cut_twice_steps_every_env(monkeypatch):
    """A Ctrl-C between two workers' slots of a ``shm`` step's hand-out (Python raises it
    at the loop's jump back), and another in the redo, at the same place: worker 1 never
    had its command, so the step was done by worker 0's envs alone, and worker 1's went on
    one step behind (against the docs' "a step is all or nothing"). Now the redo holds
    Ctrl-C off, and a hand-out cut before it could do so is finished by the next call
    first: every env stepped, the trajectories are those of an undisturbed run. (The
    Ctrl-Cs are raised by a stand-in for the hand-out: a real one lands there too rarely
    to test.)"""
    from deszoo.vector.shm import ShmTransport

    hand_out = ShmTransport.hand_out
    left = {"cuts": 2}

    def cut_between(self, ws, state, code):
        if left["cuts"] and len(ws) > 1:
            left["cuts"] -= 1
            hand_out(self, ws[:1], state, code)  # worker 0's slot written, its bell rung
            raise KeyboardInterrupt  # ... and a Ctrl-C before worker 1's
        hand_out(self, ws, state, code)

    vec = make_vec("jobshop_v0", 4, seed=6, backend="shm", num_workers=2, timeout=20.0,
                   preset="small")
    ref = make_vec("jobshop_v0", 4, seed=6, backend="roundrobin", preset="small")
    try:
        _, infos = vec.reset()
        ref.reset()
        infos = run_after_cut(vec, ref, infos, steps=2)
        acts = legal_last(infos["action_mask"])
        monkeypatch.setattr(ShmTransport, "hand_out", cut_between)
        with pytest.raises(KeyboardInterrupt):
            vec.step(acts)
        assert left["cuts"] == 0, "the hand-out was not done again"
        vec.get_attr("possible_agents")  # finishes the cut-short step
        _, _, _, _, infos = ref.step(acts)  # (its results were dropped)
        run_after_cut(vec, ref, infos)
    finally:
        vec.close()
        ref.close()


class _Hang(Exception):
    pass


@pytest.mark.filterwarnings("ignore::deszoo.errors.MasksIgnoredWarning")
def test_a_ctrl_c_inside_the_hand_out_barrier_leaves_no_lock_taken():
    """``shm``'s hand-out takes and releases a private lock as a memory barrier. A Ctrl-C
    that Python raised right after the lock was taken (at the return from ``acquire``)
    left it taken, and the hand-out done again waited for it for ever (a chaos run hung
    there: the main thread in ``hand_out``'s ``acquire``, its watchdog's SIGALRM taken by
    the SIGINT thread). Now a hand-out that finds it taken uses a fresh lock: the step is
    done again in full and the run goes on. (The Ctrl-C is raised by a stand-in for the
    lock.)"""
    vec = make_vec("jobshop_v0", 4, seed=7, backend="shm", num_workers=2, timeout=20.0,
                   preset="small")
    ref = make_vec("jobshop_v0", 4, seed=7, backend="roundrobin", preset="small")
    real = vec.transport.barrier

    class CutAfterAcquire:
        cuts = 1

        def acquire(self, *args):
            got = real.acquire(*args)
            if CutAfterAcquire.cuts:
                CutAfterAcquire.cuts -= 1
                raise KeyboardInterrupt  # as Python raises it when acquire returns
            return got

        def release(self):
            real.release()

        def locked(self):
            return real.locked()

    def hang(signum, frame):
        raise _Hang("the hand-out waits for its own lock")

    old = signal.signal(signal.SIGALRM, hang)
    watchdog = threading.Timer(15.0, signal.pthread_kill,
                               (threading.main_thread().ident, signal.SIGALRM))
    watchdog.start()
    try:
        _, infos = vec.reset()
        ref.reset()
        acts = legal_last(infos["action_mask"])
        vec.transport.barrier = CutAfterAcquire()
        try:
            with pytest.raises(KeyboardInterrupt):
                vec.step(acts)
            assert CutAfterAcquire.cuts == 0
            vec.get_attr("possible_agents")  # finishes the cut-short step
        finally:
            vec.transport.barrier = real
        _, _, _, _, infos = ref.step(acts)
        run_after_cut(vec, ref, infos)
        assert not vec.transport.barrier.locked()  # a lock found taken was replaced
    finally:
        watchdog.cancel()
        signal.signal(signal.SIGALRM, old)
        vec.close()
        ref.close()
