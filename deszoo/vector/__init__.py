"""Vector backends: many SimPy envs sampled as one Gymnasium ``VectorEnv`` over agents.

Example::

    from deszoo.vector import make_vec

    vec = make_vec("jobshop_v0", 8, backend="shm", num_workers=2, preset="small")
    obs, infos = vec.reset()
    obs, rew, term, trunc, infos = vec.step(actions)  # int array, shape (vec.num_envs,)
    vec.close()

Backends: ``roundrobin`` (one process), ``supersuit`` (SuperSuit's multiprocess
vectorization, seeded correctly), ``shm`` (our shared-memory workers, sync or async) and
``ray`` (Ray actors, on one machine or a cluster; with ``per_node=True`` one actor per node,
each running a ``shm`` pool of its cores; ``pip install 'deszoo[ray]'``).
Every backend returns bit-identical results for the same seed and actions. See
``docs/vector.md``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from deszoo.core.arrays import is_array_env
from deszoo.core.config import check_seed
from deszoo.core.memory import check_fits, env_bytes
from deszoo.errors import ConfigError
from deszoo.vector.base import DeszooVecEnv, VecSpec, step_seconds

__all__ = [
    "BACKENDS",
    "DeszooVecEnv",
    "VecSpec",
    "make_vec",
    "register_backend",
    "step_seconds",
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

    if num_workers not in (None, 1):
        raise ConfigError(
            f"num_workers={num_workers!r}: backend 'roundrobin' runs every env in the calling "
            "process; leave num_workers out (or 1), or use backend='shm'"
        )
    _no_start_method("roundrobin", start_method)
    return RoundRobinVecEnv(spec, seed=seed, batch_size=batch_size, timeout=timeout, **opts)


def _supersuit(spec: VecSpec, seed, num_workers, batch_size, timeout, start_method, **opts):
    from deszoo.vector.supersuit_backend import SuperSuitVecEnv

    cpus = _workers("supersuit", spec, num_workers, minimum=0)
    return SuperSuitVecEnv(
        spec, seed=seed, num_cpus=cpus, timeout=timeout, start_method=start_method,
        batch_size=batch_size, **opts,
    )


def _shm(spec: VecSpec, seed, num_workers, batch_size, timeout, start_method, **opts):
    from deszoo.vector.shm import ShmVecEnv

    return ShmVecEnv(
        spec, seed=seed, num_workers=_workers("shm", spec, num_workers), batch_size=batch_size,
        timeout=timeout, start_method=start_method, **opts,
    )


def _ray(spec: VecSpec, seed, num_workers, batch_size, timeout, start_method,
         per_node: bool = False, **opts):
    from deszoo.vector.ray_backend import RayVecEnv, import_ray

    import_ray()  # ImportError saying how to install it
    if per_node:  # one actor per node, each running a shm pool of that node's cores
        from deszoo.vector.ray_nodes import RayNodeVecEnv

        if num_workers is not None:
            num_workers = _workers("ray", spec, num_workers)
        return RayNodeVecEnv(spec, seed=seed, num_workers=num_workers, timeout=timeout,
                             batch_size=batch_size, start_method=start_method, **opts)
    _no_start_method("ray", start_method)
    return RayVecEnv(spec, seed=seed, num_workers=_workers("ray", spec, num_workers),
                     timeout=timeout, batch_size=batch_size, **opts)


def _workers(backend: str, spec: VecSpec, num_workers: int | None, minimum: int = 1) -> int:
    """The worker count: the given one, checked, or the usable cores (at most one per env)."""
    if num_workers is None:
        return min(usable_cores(), spec.num_sims)
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < minimum:
        raise ConfigError(
            f"num_workers={num_workers!r} must be an int >= {minimum} for backend {backend!r}"
        )
    if num_workers > spec.num_sims:
        raise ConfigError(
            f"num_workers={num_workers} is more than num_envs={spec.num_sims}: each worker "
            "hosts at least one env; lower num_workers (or leave it out: the usable cores, "
            "at most one per env)"
        )
    return num_workers


def _no_start_method(backend: str, start_method: str | None) -> None:
    if start_method is not None:
        raise ConfigError(
            f"start_method={start_method!r}: backend {backend!r} starts no processes of its "
            "own; leave start_method out"
        )


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
        if not is_array_env(probe):  # any other ParallelEnv: through its dict API
            from deszoo.vector.adapter import ArrayFactory, ParallelEnvArrays

            probe.close()
            probe = ParallelEnvArrays(factory())
            factory = ArrayFactory(factory)
        name = (probe.metadata or {}).get("name", type(probe).__name__)
        rows = probe.rows
        n = len(rows.names)
        check_fits(
            f"make_vec({name!r}, {num_envs})",
            num_envs * env_bytes(n, rows.obs_dim, rows.mask_dim, model=hasattr(probe, "p")),
            f"{num_envs} envs x {n} agents, observations of {rows.obs_dim} floats",
        )
        return VecSpec(
            factory=factory,
            name=name,
            num_sims=num_envs,
            rows=rows,
            mask_in_obs=bool(getattr(probe, "mask_in_obs", False)),
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
    per_node: bool = False,
    spin_us: float | None = None,
    **env_kwargs: Any,
) -> DeszooVecEnv:
    """Build ``num_envs`` copies of a scenario as one vector env over their agents.

    Args:
        env: a registered scenario name (``deszoo.list_envs()``) or a zero-argument
            factory (pickled with cloudpickle, so lambdas work) returning a deszoo env or
            any PettingZoo ``ParallelEnv`` (run through its dict API; see
            :mod:`deszoo.vector.adapter` for what batches).
        num_envs: simulations in the batch. The vector env has ``num_envs * n_agents``
            rows (its Gymnasium ``num_envs``): env-major, agent-minor.
        backend: ``"shm"`` (default), ``"roundrobin"``, ``"supersuit"``, ``"ray"`` or a
            registered one.
        num_workers: worker processes (``shm``), Ray actors (``ray``) or SuperSuit
            ``num_cpus`` (0 or 1: in the calling process); at most ``num_envs``; default:
            the usable cores, at most one per env. The envs need not divide evenly.
            ``roundrobin`` has no workers (leave it out).
        seed: seed of the first ``reset()`` without a seed; env ``i`` gets ``seed + i``.
            ``None``: OS entropy.
        batch_size: envs per ``recv()`` (async mode) when below ``num_envs``.
        timeout: seconds to wait for a worker before it counts as hung.
        on_error: what a fault (an env exception, a dead or hung worker) does once it is
            repaired (the env rebuilt, the worker replaced, their rows reported truncated
            with ``infos["restarted"]``): ``"raise"`` (default) raises it, ``"restart"``
            logs it. Bad input (actions) always raises.
        start_method: multiprocessing start method (``"fork"``, ``"spawn"``, ...) of
            ``shm`` and ``supersuit`` workers (and of ``ray`` pools with ``per_node``).
        autoreset_mode: ``"NextStep"`` (Gymnasium's default), ``"SameStep"`` or
            ``"Disabled"`` (reset ended envs with ``reset(options={"reset_mask": m})``).
        copy: return copies (default) or views of the batch buffers, valid until the next
            step.
        address: ``ray`` only: the Ray cluster to start or join if Ray is not initialised
            (``None``, ``"auto"``, ``"host:port"``, ``"ray://host:10001"``); see
            ``docs/distributed.md``.
        per_node: ``ray`` only: one actor per Ray node, each running a ``shm`` pool of
            that node's cores, so a step costs one remote call per node; ``num_workers``
            is then the pools' worker processes in all (default: the cluster's CPUs, at
            most one per env). See ``docs/distributed.md``.
        spin_us: ``shm`` (and ``ray`` with ``per_node``) only: microseconds an idle worker
            polls for its next command before it sleeps (default: 2000 when each worker can
            have a core, else 0; 0 in ``ray`` pools).
        **env_kwargs: scenario arguments (``preset="small"``, ...), only with a name.

    Returns:
        A :class:`DeszooVecEnv` (a Gymnasium 1.x ``VectorEnv``).
    """
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; valid: {sorted(BACKENDS)}")
    check_seed(seed, "make_vec(seed=...)")
    extra = {}
    if address is not None:
        if backend in ("roundrobin", "supersuit", "shm"):
            raise ConfigError(f"address={address!r} is for backend='ray' only")
        extra["address"] = address
    if per_node:
        if backend in ("roundrobin", "supersuit", "shm"):
            raise ConfigError(f"per_node={per_node!r} is for backend='ray' only")
        extra["per_node"] = True
    if spin_us is not None:
        if backend != "shm" and not per_node:
            raise ConfigError(
                f"spin_us={spin_us!r} is for backend='shm' (or 'ray' with per_node=True) only"
            )
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
