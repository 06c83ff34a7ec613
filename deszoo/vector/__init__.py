"""Vector backends: many SimPy envs sampled as one Gymnasium ``VectorEnv`` over agents.

Example::

    from deszoo.vector import make_vec

    vec = make_vec("jobshop_v0", 8, backend="shm", num_workers=2, preset="small")
    obs, infos = vec.reset()
    obs, rew, term, trunc, infos = vec.step(actions)  # int array, shape (vec.num_envs,)
    vec.close()

Backends: ``roundrobin`` (one process), ``supersuit`` (SuperSuit's multiprocess
vectorization, seeded correctly), ``shm`` (our shared-memory workers, sync or async) and
``ray`` (Ray actors, on one machine or a cluster; ``pip install 'deszoo[ray]'``).
Every backend returns bit-identical results for the same seed and actions. See
``docs/vector.md``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from deszoo.errors import ConfigError
from deszoo.vector.base import DeszooVecEnv, VecSpec

__all__ = [
    "BACKENDS",
    "DeszooVecEnv",
    "VecSpec",
    "make_vec",
    "register_backend",
    "to_sb3",
    "usable_cores",
]


def usable_cores() -> int:
    """Cores this process may run on (the default ``num_workers``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _roundrobin(spec: VecSpec, seed, num_workers, batch_size, timeout, start_method, **opts):
    from deszoo.vector.roundrobin import RoundRobinVecEnv

    _sync_only("roundrobin", spec, batch_size)
    return RoundRobinVecEnv(spec, seed=seed, **opts)


def _supersuit(spec: VecSpec, seed, num_workers, batch_size, timeout, start_method, **opts):
    from deszoo.vector.supersuit_backend import SuperSuitVecEnv

    _sync_only("supersuit", spec, batch_size)
    return SuperSuitVecEnv(
        spec, seed=seed, num_cpus=num_workers, timeout=timeout, start_method=start_method,
        **opts,
    )


def _shm(spec: VecSpec, seed, num_workers, batch_size, timeout, start_method, **opts):
    from deszoo.vector.shm import ShmVecEnv

    return ShmVecEnv(
        spec, seed=seed, num_workers=num_workers, batch_size=batch_size, timeout=timeout,
        start_method=start_method, **opts,
    )


def _ray(spec: VecSpec, seed, num_workers, batch_size, timeout, start_method, **opts):
    from deszoo.vector.ray_backend import RayVecEnv, import_ray

    import_ray()  # ImportError saying how to install it
    _sync_only("ray", spec, batch_size)
    if start_method is not None:
        raise ConfigError("backend 'ray' starts its own processes; start_method must be None")
    return RayVecEnv(spec, seed=seed, num_workers=num_workers, timeout=timeout, **opts)


def _sync_only(name: str, spec: VecSpec, batch_size: int | None) -> None:
    if batch_size is not None and batch_size != spec.num_sims:
        raise ConfigError(f"backend {name!r} has no async mode; batch_size must be None")


# Backend name -> builder(spec, seed, num_workers, batch_size, timeout, start_method, **opts).
BACKENDS: dict[str, Callable[..., DeszooVecEnv]] = {
    "roundrobin": _roundrobin,
    "supersuit": _supersuit,
    "shm": _shm,
    "ray": _ray,
}


def register_backend(name: str, builder: Callable[..., DeszooVecEnv]) -> None:
    """Add a backend (e.g. ``ray``) under ``name``; it must subclass :class:`DeszooVecEnv`."""
    BACKENDS[name] = builder


class _Pickled:
    """A user factory that pickles with cloudpickle, so lambdas work under ``spawn``."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn

    def __call__(self) -> Any:
        return self.fn()

    def __getstate__(self):
        import cloudpickle

        return cloudpickle.dumps(self.fn)

    def __setstate__(self, state):
        import pickle

        self.fn = pickle.loads(state)


def _spec(env: str | Callable[[], Any], num_envs: int, env_kwargs: dict) -> VecSpec:
    from deszoo import registry

    if isinstance(env, str):
        registry.env_module(env)  # ConfigError for unknown names
        factory: Callable[[], Any] = functools.partial(registry.make, env, **env_kwargs)
    elif callable(env):
        if env_kwargs:
            raise ConfigError(
                f"make_vec got a factory and keyword arguments {sorted(env_kwargs)}; a factory "
                "takes no arguments (bind them with functools.partial)"
            )
        factory = _Pickled(env)
    else:
        raise ConfigError(f"env must be a registered name or a zero-argument factory, got {env!r}")
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ConfigError(f"num_envs={num_envs!r} must be a positive int (number of envs)")
    probe = factory()
    try:
        if not hasattr(probe, "reset_arrays"):
            raise ConfigError(
                f"{type(probe).__name__} is not a deszoo SimPyParallelEnv; vector backends use "
                "its array API (reset_arrays/step_arrays)"
            )
        agents = tuple(probe.possible_agents)
        name = probe.metadata.get("name", type(probe).__name__)
        return VecSpec(
            factory=factory,
            name=name,
            num_sims=num_envs,
            agents=agents,
            observation_space=probe.observation_space(agents[0]),
            action_space=probe.action_space(agents[0]),
        )
    finally:
        probe.close()


def make_vec(
    env: str | Callable[[], Any],
    num_envs: int,
    backend: str = "shm",
    num_workers: int | None = None,
    seed: int | None = 0,
    *,
    batch_size: int | None = None,
    timeout: float = 60.0,
    on_error: str = "raise",
    start_method: str | None = None,
    autoreset_mode: str = "NextStep",
    copy: bool = True,
    address: str | None = None,
    spin_us: float | None = None,
    **env_kwargs: Any,
) -> DeszooVecEnv:
    """Build ``num_envs`` copies of a scenario as one vector env over their agents.

    Args:
        env: a registered scenario name (``deszoo.list_envs()``) or a picklable
            zero-argument factory returning a ``SimPyParallelEnv``.
        num_envs: simulations in the batch. The vector env has ``num_envs * n_agents``
            rows (its Gymnasium ``num_envs``): env-major, agent-minor.
        backend: ``"shm"`` (default), ``"roundrobin"``, ``"supersuit"``, ``"ray"`` or a
            registered one.
        num_workers: worker processes (``shm``), Ray actors (``ray``) or SuperSuit
            ``num_cpus``; default: the usable cores. Capped at ``num_envs``; the envs need
            not divide evenly.
        seed: seed of the first ``reset()`` without a seed; env ``i`` gets ``seed + i``.
            ``None``: OS entropy.
        batch_size: ``shm`` only: envs per ``recv()`` (async mode) when below ``num_envs``.
        timeout: seconds to wait for a worker before raising ``WorkerTimeoutError``.
        on_error: ``"raise"`` (default) or ``"restart"`` (rebuild failed envs, report their
            episodes truncated with ``infos["restarted"]``; ``roundrobin`` and ``shm``).
        start_method: multiprocessing start method (``"fork"``, ``"spawn"``, ...).
        autoreset_mode: ``"NextStep"`` (Gymnasium's default) or ``"SameStep"``.
        copy: return copies (default) or views of the batch buffers, valid until the next
            step.
        address: ``ray`` only: the Ray cluster to start or join if Ray is not initialised
            (``None``, ``"auto"``, ``"host:port"``, ``"ray://host:10001"``); see
            ``docs/distributed.md``.
        spin_us: ``shm`` only: microseconds an idle worker polls for its next command
            before it sleeps (default: 300 when each worker can have a core, else 0).
        **env_kwargs: scenario arguments (``preset="small"``, ...), only with a name.

    Returns:
        A :class:`DeszooVecEnv` (a Gymnasium 1.x ``VectorEnv``).
    """
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; valid: {sorted(BACKENDS)}")
    if num_workers is None:
        num_workers = usable_cores()
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise ConfigError(f"num_workers={num_workers!r} must be a non-negative int")
    extra = {}
    if address is not None:
        if backend in ("roundrobin", "supersuit", "shm"):
            raise ConfigError(f"address={address!r} is for backend='ray' only")
        extra["address"] = address
    if spin_us is not None:
        if backend != "shm":
            raise ConfigError(f"spin_us={spin_us!r} is for backend='shm' only")
        extra["spin_us"] = spin_us
    spec = _spec(env, num_envs, env_kwargs)
    return BACKENDS[backend](
        spec, seed, num_workers, batch_size, timeout, start_method,
        on_error=on_error, autoreset_mode=autoreset_mode, copy=copy, **extra,
    )


def to_sb3(vec: DeszooVecEnv):
    """Wrap ``vec`` (built with ``autoreset_mode="SameStep"``) as an SB3 ``VecEnv``."""
    from deszoo.vector.sb3 import to_sb3 as _to_sb3

    return _to_sb3(vec)
