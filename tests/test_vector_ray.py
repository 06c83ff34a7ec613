"""What is particular to the ``ray`` backend (its placement, its arguments, starting Ray).

The shared vector suite (``test_vector.py``) and the fault suite
(``test_vector_faults.py``) run on ray too, on the session's local Ray (``conftest.py``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from test_vector import scenario_kwargs
from test_vector_faults import assert_gone, shm_entries, step_n

import deszoo
from deszoo.errors import ConfigError, SubEnvError, WorkerDiedError
from deszoo.rollouts import assert_same_rollouts, legal_last, rollout
from deszoo.vector import make_vec
from devkit.toyenv import ToyEnv

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.usefixtures("ray_session")


def toy(**kwargs):
    return functools.partial(ToyEnv, **kwargs)


def test_actors_split_envs_and_use_the_running_ray():
    vec = make_vec(toy(), 5, backend="ray", num_workers=2)
    try:
        assert vec.num_workers == 2 and not vec.started_ray
        assert [w.count for w in vec.workers] == [3, 2]
        pids = vec.worker_pids()
        assert len(set(pids)) == 2 and os.getpid() not in pids
        assert len(vec.worker_nodes()) == 2
    finally:
        vec.close()
    assert_gone(pids)
    with pytest.warns(UserWarning, match="already initialised"):
        make_vec(toy(), 1, backend="ray", num_workers=1, address="auto").close()


def test_ray_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="start_method='spawn' is for per_node=True only"):
        make_vec(toy(), 2, backend="ray", start_method="spawn")
    with pytest.raises(ConfigError, match="not an option of this backend .*'ray'"):
        make_vec(toy(), 2, backend="shm", address="auto")
    with pytest.raises(ConfigError, match="boot_timeout=0 must be None or a finite number x "
                                          "with 0.001 <= x"):
        make_vec(toy(), 2, backend="ray", boot_timeout=0)
    with pytest.raises(ConfigError, match="per_node=1 must be True or False"):
        make_vec(toy(), 2, backend="ray", per_node=1)
    with pytest.raises(ConfigError, match="actor_options=.* must be None or a dict"):
        make_vec(toy(), 2, backend="ray", actor_options=[("num_cpus", 1)])


@pytest.mark.parametrize("per_node", [False, True])
def test_boot_timeout_reaches_the_pools_inside_the_actors(per_node):
    """A node actor's shm pool waits ``boot_timeout`` for its workers to build their envs,
    as the parent waits for the actor (it used to wait ``max(timeout, 30)`` whatever
    ``boot_timeout`` said, so a pool of slow envs failed to boot past 30 s)."""
    import ray

    vec = make_vec(toy(), 2, backend="ray", per_node=per_node, num_workers=1, timeout=2.0,
                   boot_timeout=75.0)
    try:
        handle = vec.transport.nodes[0].handle
        got = ray.get(handle.__ray_call__.remote(lambda host: host.pool.boot_timeout))
        assert got == vec.boot_timeout == 75.0
    finally:
        vec.close()


def test_async_mode_on_ray():
    """send/recv work on ray too (the lifecycle is the base class's)."""
    vec = make_vec(toy(), 4, backend="ray", num_workers=2, batch_size=2)
    try:
        vec.async_reset(seed=1)
        for _ in range(6):
            obs, rew, term, trunc, infos = vec.recv()
            assert len(infos["env_id"]) == 6
            vec.send(infos["action_mask"].argmax(axis=1), infos["env_id"])
    finally:
        vec.close()


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


# ---- per_node=True: one actor per node, each running a shm pool ------------------------
def make_pools(env, num_envs, chunk_bytes=None, **kwargs):
    """A ``per_node`` vector env with two node actors on the session's one node (1 and 2
    workers), as a two-node cluster would have; replies cut in ``chunk_bytes`` pieces."""
    from deszoo.vector import _spec
    from deszoo.vector.ray_nodes import RayNodeVecEnv

    cls = RayNodeVecEnv
    if chunk_bytes is not None:
        cls = type("SmallChunks", (RayNodeVecEnv,), {"chunk_bytes": chunk_bytes})
    node = ray.get_runtime_context().get_node_id()
    env_kwargs = {k: kwargs.pop(k) for k in ("preset", "max_steps") if k in kwargs}
    seed = kwargs.pop("seed", 0)
    return cls.create(_spec(env, num_envs, env_kwargs), seed, nodes=[(node, 1), (node, 2)],
                      per_node=True, **kwargs)


@pytest.mark.parametrize("scenario, mode", [
    *[(s, "NextStep") for s in deszoo.list_envs()],
    ("jobshop_v0", "SameStep"), ("ridehail_v0", "SameStep"), ("supplychain_v0", "SameStep"),
])
def test_per_node_pools_are_bit_identical(scenario, mode):
    """Two node actors (1 + 2 shm workers, 5 envs split 2/2/1) give roundrobin's bytes;
    in NextStep mode their replies come in chunks of 1000 bytes (as large replies do)."""
    kwargs = scenario_kwargs(scenario)
    ref = make_vec(scenario, 5, backend="roundrobin", seed=11, autoreset_mode=mode, **kwargs)
    chunk = 1000 if mode == "NextStep" else None
    vec = make_pools(scenario, 5, chunk, seed=11, autoreset_mode=mode, **kwargs)
    try:
        assert vec.node_workers() == [[0], [1, 2]]
        assert [w.count for w in vec.workers] == [2, 2, 1]
        assert_same_rollouts(rollout(ref, 50), rollout(vec, 50), f"{scenario} {mode}")
    finally:
        vec.close()
        ref.close()


def test_per_node_pools_carry_the_state():
    """make_vec(state=True) per node (2 node actors, replies in chunks): each env's state
    and final state equal a serial replay's."""
    from test_vector import assert_state_replays

    kwargs = {"preset": "small", "max_steps": 20}
    vec = make_pools("ridehail_v0", 3, 1000, state=True, autoreset_mode="SameStep", **kwargs)
    try:
        assert_state_replays(functools.partial(deszoo.make, "ridehail_v0", **kwargs), vec, 45,
                             True)
    finally:
        vec.close()


@pytest.mark.parametrize("step_channel", [True, False])
def test_per_node_steps_through_the_channel_or_ray_alike(step_channel):
    """A whole node's step goes through its step channel (a TCP connection to its actor)
    by default, or through a Ray call with step_channel=False; both give roundrobin's bytes,
    in both autoreset modes."""
    for mode in ("NextStep", "SameStep"):
        ref = make_vec("ridehail_v0", 5, backend="roundrobin", seed=3, autoreset_mode=mode,
                       **scenario_kwargs("ridehail_v0"))
        vec = make_pools("ridehail_v0", 5, seed=3, autoreset_mode=mode,
                         step_channel=step_channel, **scenario_kwargs("ridehail_v0"))
        try:
            socks = [node.sock is not None for node in vec.transport.nodes]
            assert socks == [step_channel] * 2
            assert_same_rollouts(rollout(ref, 40), rollout(vec, 40), f"{mode} {step_channel}")
        finally:
            vec.close()
            ref.close()


def test_per_node_layout_and_arguments():
    """make_vec(per_node=True): one actor per node, its CPUs as shm workers; the split
    follows the nodes' CPUs; bad arguments raise ConfigError."""
    from deszoo.vector.ray_nodes import share

    assert share(4, [2, 2]) == [2, 2] and share(3, [1, 2]) == [1, 2]
    assert share(5, [1, 1, 2]) == [1, 1, 3] and share(1, [1, 4]) == [0, 1]
    vec = make_vec(toy(), 5, backend="ray", per_node=True)  # the session's Ray: 2 CPUs
    try:
        assert vec.per_node and vec.num_workers == 2 and vec.node_workers() == [[0, 1]]
        pids, actors = vec.worker_pids(), vec.actor_pids()
        assert len(set(pids)) == 2 and len(actors) == 1 and not set(pids) & set(actors)
        assert len(vec.worker_nodes()) == 2
    finally:
        vec.close()
    assert_gone(pids + actors)
    vec = make_vec(toy(), 3, backend="ray", per_node=True, num_workers=3, spin_us=0,
                   start_method="fork")
    vec.close()
    for bad in (dict(backend="shm", per_node=True),
                dict(backend="ray", spin_us=10),
                dict(backend="ray", per_node=True, start_method="nope"),
                dict(backend="ray", per_node=True, num_workers=9)):
        with pytest.raises(ConfigError):
            make_vec(toy(), 2, **bad)
    from deszoo.vector import _spec
    from deszoo.vector.ray_nodes import RayNodeVecEnv

    with pytest.raises(ConfigError, match="nodes"):
        RayNodeVecEnv.create(_spec(toy(), 2, {}), nodes=[("x", 0)], per_node=True)


@pytest.mark.parametrize("on_error", ["raise", "restart"])
def test_lost_node_actor(on_error):
    """SIGKILL a node actor: its workers count as dead (WorkerDiedError naming the actor and
    the envs, or a restart), the other node's rows are kept, a new actor takes over and
    close() leaves no process and no shared memory."""
    before = shm_entries()
    vec = make_pools(toy(), 5, seed=3, timeout=20.0, on_error=on_error)
    ref = make_vec(toy(), 5, seed=3, backend="roundrobin")
    old = vec.worker_pids() + vec.actor_pids()
    try:
        _, infos = vec.reset()
        ref.reset()
        os.kill(vec.actor_pids()[1], signal.SIGKILL)  # node 1: workers 1, 2, envs 2..4
        time.sleep(0.1)
        acts = legal_last(infos["action_mask"])
        ref_obs, *_ = ref.step(acts)
        if on_error == "raise":
            with pytest.raises(WorkerDiedError, match=r"ray node actor 1 .*envs 2\.\.3") as err:
                vec.step(acts)
            assert "1 more fault" in str(err.value)
            obs, rew, term, trunc, infos = err.value.results
        else:
            obs, rew, term, trunc, infos = vec.step(acts)
        np.testing.assert_array_equal(obs[:6], ref_obs[:6])
        assert infos["restarted"][6:].all() and trunc[6:].all()
        assert not infos["restarted"][:6].any()
        assert vec.actor_pids()[1] not in old and vec.actor_pids()[0] in old
        infos = step_n(vec, infos, 3)
        assert infos["live"][6:].any()
        new = vec.worker_pids() + vec.actor_pids()
    finally:
        vec.close()
        ref.close()
    assert_gone(old + new)
    assert shm_entries() <= before


def test_per_node_env_error_names_the_env():
    """An env exception in a pool is a SubEnvError with the batch-wide env index."""
    vec = make_pools(toy(fail_at=2, fail_seed=13), 5, seed=10)
    try:
        _, infos = vec.reset()
        infos = step_n(vec, infos, 1)
        with pytest.raises(SubEnvError, match="env 3 raised ValueError") as err:
            vec.step(legal_last(infos["action_mask"]))
        assert err.value.env_index == 3 and "step_arrays" in err.value.worker_traceback
        step_n(vec, err.value.results[4], 2)
    finally:
        vec.close()


def test_per_node_restart_of_envs_in_every_worker():
    """Every env fails in one step (restart mode): each worker's rebuild reply touches its
    own rows only, so all rows report the truncation; the next step starts them again."""
    vec = make_pools(toy(fail_at=2), 5, seed=10, on_error="restart")
    try:
        _, infos = vec.reset()
        infos = step_n(vec, infos, 1)
        obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
        assert infos["restarted"].all() and trunc.all() and not term.any()
        assert not infos["live"].any() and (obs == 0).all()
        obs, rew, term, trunc, infos = vec.step(legal_last(infos["action_mask"]))
        assert not infos["restarted"].any() and infos["live"].all()
    finally:
        vec.close()


def test_per_node_async_mode_matches_sync():
    """send/recv over two node actors (one worker per recv): each env's observations, in
    the order it produced them, are those of a sync roundrobin run."""
    vec = make_pools(toy(), 6, seed=4, batch_size=2)
    ref = make_vec(toy(), 6, seed=4, backend="roundrobin")
    try:
        obs, infos = ref.reset()
        want = [obs]
        for _ in range(6):
            obs, *_, infos = ref.step(legal_last(infos["action_mask"]))
            want.append(obs)
        seen = {e: 0 for e in range(6)}  # observations checked per env
        vec.async_reset()
        for _ in range(12):
            obs, _, _, _, infos = vec.recv()
            for k, row in enumerate(infos["env_id"][::3].tolist()):
                e = row // 3
                if seen[e] < len(want):
                    np.testing.assert_array_equal(obs[3 * k : 3 * k + 3],
                                                  want[seen[e]][row : row + 3])
                seen[e] += 1
            vec.send(legal_last(infos["action_mask"]), infos["env_id"])
        assert sum(seen.values()) == 12 * 2 and min(seen.values()) >= 1
    finally:
        vec.close()
        ref.close()


@pytest.mark.parametrize("batch_size", [None, 2])
def test_per_node_late_pool_reply_keeps_the_healthy_worker(monkeypatch, batch_size):
    """A pool reports a stopped worker as hung after ``timeout``; on a busy machine its
    node actor's reply comes later than that. The parent waits ``timeout`` plus a grace for
    the node, so only the stopped worker is replaced (its grace used to be 50 ms, one
    poll slice, and then the node's healthy worker was replaced too). Here the pool's own
    timeout is made 1 s longer than the parent's: its reply comes 1 s late."""
    from deszoo.vector.ray_nodes import RayNodeTransport

    init = RayNodeTransport.__init__

    def late_pool(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.pool_options["timeout"] += 1.0

    monkeypatch.setattr(RayNodeTransport, "__init__", late_pool)
    vec = make_vec(toy(), 4, backend="ray", per_node=True, num_workers=2, seed=0,
                   timeout=2.0, on_error="restart", batch_size=batch_size)
    try:
        stopped = vec.worker_pids()[1]  # worker 1: envs 2..3
        if batch_size is None:
            _, infos = vec.reset()
            os.kill(stopped, signal.SIGSTOP)
            _, _, _, trunc, infos = vec.step(legal_last(infos["action_mask"]))
            restarted = infos["restarted"]
        else:
            vec.async_reset()
            restarted = np.zeros(vec.num_envs, bool)
            os.kill(stopped, signal.SIGSTOP)  # it has its reset in flight, or has answered
            for _ in range(4):  # both workers answer twice at least
                _, _, _, _, infos = vec.recv()
                restarted[infos["env_id"]] |= infos["restarted"]
                vec.send(legal_last(infos["action_mask"]), infos["env_id"])
        n = vec.agents_per_sim
        assert restarted[2 * n :].all() and not restarted[: 2 * n].any(), restarted
        assert stopped not in vec.worker_pids()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(stopped, signal.SIGCONT)
        vec.close()


def test_actors_that_cannot_be_placed_time_out_as_documented():
    """An actor Ray cannot place (more CPUs than the cluster has) is a WorkerTimeoutError
    after boot_timeout, as docs/distributed.md says (it was a VectorEnvError: "hung")."""
    from deszoo.errors import WorkerTimeoutError

    with pytest.raises(WorkerTimeoutError, match="did not start within boot_timeout=2 s"):
        make_vec(toy(), 1, backend="ray", num_workers=1, boot_timeout=2.0, close_timeout=0.5,
                 actor_options={"num_cpus": 1000})
