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
from collections.abc import Callable
from typing import Any

from gymnasium import spaces

from deszoo.core.arrays import is_array_env
from deszoo.core.config import check_seed
from deszoo.core.memory import check_fits, env_bytes
from deszoo.errors import ConfigError
from deszoo.vector.base import DeszooVecEnv, VecSpec, step_seconds
from deszoo.vector.options import check_options
from deszoo.vector.pool import usable_cores

__all__ = [
    "BACKENDS",
    "DeszooVecEnv",
    "VecSpec",
    "make_vec",
    "option_names",
    "register_backend",
    "step_seconds",
    "to_sb3",
    "usable_cores",
]


def _backends() -> dict[str, type[DeszooVecEnv]]:
    # Imported here: the backend modules import deszoo.vector.base, and each imports its
    # heavy packages (supersuit, ray) only when a vector env is built.
    from deszoo.vector.ray_backend import RayVecEnv
    from deszoo.vector.roundrobin import RoundRobinVecEnv
    from deszoo.vector.shm import ShmVecEnv
    from deszoo.vector.supersuit_backend import SuperSuitVecEnv

    return {"roundrobin": RoundRobinVecEnv, "supersuit": SuperSuitVecEnv, "shm": ShmVecEnv,
            "ray": RayVecEnv}


# Backend name -> class: each declares its options (``declared()``) and builds itself.
BACKENDS: dict[str, type[DeszooVecEnv]] = _backends()


def register_backend(name: str, cls: type[DeszooVecEnv]) -> None:
    """Add a backend under ``name``: a subclass of :class:`DeszooVecEnv` that declares its
    options (``options``) and builds its transport (``_transport``)."""
    if not (isinstance(cls, type) and issubclass(cls, DeszooVecEnv)):
        raise ConfigError(f"register_backend({name!r}, {cls!r}): not a DeszooVecEnv subclass")
    BACKENDS[name] = cls


def option_names() -> dict[str, list[str]]:
    """Every backend option name -> the backends that take it."""
    out: dict[str, list[str]] = {}
    for backend, cls in BACKENDS.items():
        for o in cls.declared():
            out.setdefault(o.name, []).append(backend)
    return out


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
        state_space = getattr(probe, "state_space", None)
        if not (isinstance(state_space, spaces.Box) and len(state_space.shape) == 1):
            state_space = None
        return VecSpec(
            factory=factory,
            name=name,
            num_sims=num_envs,
            rows=rows,
            mask_in_obs=bool(getattr(probe, "mask_in_obs", False)),
            state_space=state_space,
        )
    finally:
        probe.close()


def make_vec(
    env: str | Callable[[], Any],
    num_envs: int,
    backend: str = "shm",
    num_workers: int | None = None,
    seed: int | None = 0,
    **options: Any,
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
        **options: the backend's options, as it declares them (``docs/vector.md`` lists
            each backend's: ``batch_size``, ``timeout``, ``on_error``, ``autoreset_mode``,
            ``copy`` for all; ``start_method``, ``spin_us``, ``close_timeout``,
            ``address``, ``per_node``, ...), each checked against its declaration;
            every other keyword is a scenario argument (``preset="small"``, ...), with a
            name only.

    Returns:
        A :class:`DeszooVecEnv` (a Gymnasium 1.x ``VectorEnv``).
    """
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; valid: {sorted(BACKENDS)}")
    cls = BACKENDS[backend]
    if backend == "ray" and options.get("per_node") is True:
        from deszoo.vector.ray_nodes import RayNodeVecEnv as cls  # one actor per node
    check_seed(seed, "make_vec(seed=...)")
    names = option_names()
    given = {k: v for k, v in options.items() if k in names}
    env_kwargs = {k: v for k, v in options.items() if k not in names}
    if num_workers is not None:
        given["num_workers"] = num_workers
    opts = check_options(cls.declared(), given, f"make_vec(backend={backend!r})", names)
    spec = _spec(env, num_envs, env_kwargs)
    return cls.build(spec, seed, opts)


def to_sb3(vec: DeszooVecEnv):
    """Wrap ``vec`` (built with ``autoreset_mode="SameStep"``) as an SB3 ``VecEnv``."""
    from deszoo.vector.sb3 import to_sb3 as _to_sb3

    return _to_sb3(vec)
