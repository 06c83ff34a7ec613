"""What is particular to the ``ray`` backend (its placement, its arguments, starting Ray).

The shared vector suite (``test_vector.py``) and the fault suite
(``test_vector_faults.py``) run on ray too, on the session's local Ray (``conftest.py``).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
import time

import pytest
from test_vector_faults import assert_gone

from deszoo.errors import ConfigError
from deszoo.vector import make_vec
from deszoo.vector.testing import ToyEnv

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.usefixtures("ray_session")


def toy(**kwargs):
    return functools.partial(ToyEnv, **kwargs)


def test_actors_split_envs_and_use_the_running_ray():
    vec = make_vec(toy(), 5, backend="ray", num_workers=2)
    try:
        assert vec.num_workers == 2 and not vec.started_ray
        assert [w.count for w in vec._workers] == [3, 2]
        pids = vec.worker_pids()
        assert len(set(pids)) == 2 and os.getpid() not in pids
        assert len(vec.worker_nodes()) == 2
    finally:
        vec.close()
    assert_gone(pids)
    with pytest.warns(UserWarning, match="already initialised"):
        make_vec(toy(), 1, backend="ray", num_workers=1, address="auto").close()


def test_ray_rejects_bad_arguments():
    with pytest.raises(ConfigError, match="start_method"):
        make_vec(toy(), 2, backend="ray", start_method="spawn")
    with pytest.raises(ConfigError, match="ray"):
        make_vec(toy(), 2, backend="shm", address="auto")
    with pytest.raises(ConfigError, match="boot_timeout"):
        from deszoo.vector import _spec
        from deszoo.vector.ray_backend import RayVecEnv

        RayVecEnv(_spec(toy(), 2, {}), boot_timeout=0)


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
