"""Vector backends: many SimPy envs sampled as one Gymnasium ``VectorEnv`` over agents::

    from deszoo.vector import make_vec

    vec = make_vec("jobshop_v0", 8, backend="shm", num_workers=2,
                   env_kwargs={"preset": "small"})
    obs, infos = vec.reset()
    obs, rew, term, trunc, infos = vec.step(actions)  # int array, shape (vec.num_envs,)
    vec.close()

Backends ``roundrobin``, ``supersuit``, ``shm`` and ``ray`` return bit-identical results
for the same seed and actions; see ``docs/vector.md``.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

from gymnasium import spaces
from gymnasium.vector.utils import CloudpickleWrapper

from deszoo.core.arrays import is_array_env
from deszoo.core.config import check_first_seed
from deszoo.core.memory import check_fits, env_bytes
from deszoo.core.params import plain
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
    """Add a backend: a :class:`DeszooVecEnv` subclass (see ``docs/vector.md``)."""
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


def _spec(env: str | Callable[[], Any], num_sims: int, env_kwargs: dict) -> VecSpec:
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
        try:
            inspect.signature(env).bind()
        except TypeError as exc:
            raise ConfigError(
                f"make_vec: the factory {env!r} cannot be called with no arguments ({exc}); "
                "give a zero-argument factory (bind its arguments with functools.partial)"
            ) from None
        except ValueError:  # no signature to read (some builtins): the call will tell
            pass
        factory = CloudpickleWrapper(env)  # lambdas work under spawn
    else:
        raise ConfigError(f"env must be a registered name or a zero-argument factory, got {env!r}")
    probe = factory()
    try:
        if not is_array_env(probe):  # any other ParallelEnv: through its dict API
            from deszoo.core.adapter import ArrayFactory, ParallelEnvArrays

            if callable(getattr(probe, "close", None)):  # not an env: the adapter says so
                probe.close()
            probe = None
            probe = ParallelEnvArrays(factory())
            factory = ArrayFactory(factory)
        name = (probe.metadata or {}).get("name", type(probe).__name__)
        rows = probe.rows
        n = len(rows.names)
        check_fits(
            f"make_vec({name!r}, {num_sims})",
            num_sims * env_bytes(n, rows.obs_dim, rows.mask_dim, model=hasattr(probe, "p")),
            f"{num_sims} envs x {n} agents, observations of {rows.obs_dim} floats",
        )
        state_space = getattr(probe, "state_space", None)
        if not (isinstance(state_space, spaces.Box) and len(state_space.shape) == 1):
            state_space = None
        return VecSpec(
            factory=factory,
            name=name,
            num_sims=num_sims,
            rows=rows,
            mask_in_obs=bool(getattr(probe, "mask_in_obs", False)),
            state_space=state_space,
        )
    finally:
        if probe is not None:
            probe.close()


def make_vec(
    env: str | Callable[[], Any],
    num_sims: int | None = None,
    backend: str = "shm",
    num_workers: int | None = None,
    seed: int | None = 0,
    *,
    env_kwargs: dict[str, Any] | None = None,
    num_envs: int | None = None,
    **options: Any,
) -> DeszooVecEnv:
    """Build ``num_sims`` copies of a scenario as one vector env over their agents::

        make_vec("jobshop_v0", 8, backend="shm", env_kwargs={"preset": "small"}, timeout=5)

    Args:
        env: a registered scenario name (``deszoo.list_envs()``) or a zero-argument
            factory (pickled with cloudpickle, so lambdas work) returning a deszoo env or
            any PettingZoo ``ParallelEnv`` (run through its dict API; see
            :mod:`deszoo.core.adapter` for what batches).
        num_sims: simulations in the batch (``vec.num_sims``). The vector env has
            ``num_sims * n_agents`` rows (its Gymnasium ``num_envs``): env-major,
            agent-minor.
        backend: ``"shm"`` (default), ``"roundrobin"``, ``"supersuit"``, ``"ray"`` or a
            registered one.
        num_workers: worker processes (``shm``), Ray actors (``ray``) or SuperSuit
            ``num_cpus`` (0 or 1: in the calling process); at most ``num_sims``; default:
            the usable cores, at most one per env. The envs need not divide evenly.
            ``roundrobin`` has no workers (leave it out).
        seed: seed of the first ``reset()`` without a seed; env ``i`` gets ``seed + i``.
            ``None``: OS entropy.
        env_kwargs: the scenario's arguments (``{"preset": "small", "max_steps": 500}``),
            checked by the scenario when the first env is built; not with a factory.
        num_envs: the old name of ``num_sims``; deprecated (``DeprecationWarning``): it
            read as the rows that ``vec.num_envs`` counts.
        **options: the backend's options, as it declares them (``docs/vector.md`` lists
            each backend's, with their bounds: ``batch_size``, ``timeout``, ``on_error``,
            ``autoreset_mode``, ``copy``, ``state`` for all; ``start_method``,
            ``spin_us``, ``close_timeout``, ``address``, ``per_node``, ...), each checked
            against its declaration (NumPy scalars are made plain Python numbers). Without
            ``env_kwargs``, a keyword that no backend declares is taken as a scenario
            argument (the form of earlier versions: ``make_vec(name, 8, preset="small")``);
            with ``env_kwargs``, it is an error.

    Returns:
        A :class:`DeszooVecEnv` (a Gymnasium 1.x ``VectorEnv``).

    Raises:
        ConfigError: an unknown backend, option or scenario argument, or a value out of
            its bounds (naming it and what is accepted).
    """
    if num_envs is not None:
        if num_sims is not None:
            raise ConfigError(f"make_vec got num_sims={num_sims!r} and num_envs={num_envs!r}; "
                              "they are two names of one count, give num_sims")
        warnings.warn("make_vec(num_envs=...) is deprecated: use num_sims= (the number of "
                      "simulations; vec.num_envs counts their agents' rows)",
                      DeprecationWarning, stacklevel=2)
        num_sims = num_envs
    if num_sims is None:
        raise ConfigError("make_vec needs num_sims, the number of simulations in the batch")
    num_sims = plain(num_sims)
    if isinstance(num_sims, bool) or not isinstance(num_sims, int) or num_sims < 1:
        raise ConfigError(f"num_sims={num_sims!r} must be a positive int (simulations in "
                          "the batch)")
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; valid: {sorted(BACKENDS)}")
    cls = BACKENDS[backend]
    if backend == "ray" and plain(options.get("per_node")) is True:
        from deszoo.vector.ray_nodes import RayNodeVecEnv as cls  # one actor per node
    check_first_seed(seed, num_sims, "make_vec(seed=...)")  # before any env is built
    names = option_names()
    if env_kwargs is None:  # the mixed form: scenario arguments are the undeclared names
        given = {k: v for k, v in options.items() if k in names}
        env_kwargs = {k: v for k, v in options.items() if k not in names}
    elif not isinstance(env_kwargs, dict):
        raise ConfigError(f"make_vec: env_kwargs={env_kwargs!r} must be a dict of the "
                          "scenario's arguments")
    else:
        given = dict(options)
        for k in given:
            if k not in names:
                raise ConfigError(
                    f"make_vec(backend={backend!r}): {k}={given[k]!r} is not a backend "
                    f"option; scenario arguments go in env_kwargs (env_kwargs={{{k!r}: ...}})"
                )
    if num_workers is not None:
        given["num_workers"] = num_workers
    opts = check_options(cls.declared(), given, f"make_vec(backend={backend!r})", names)
    spec = _spec(env, num_sims, env_kwargs)
    return cls.build(spec, seed, opts)


def to_sb3(vec: DeszooVecEnv):
    """Wrap ``vec`` (built with ``autoreset_mode="SameStep"``) as an SB3 ``VecEnv``."""
    from deszoo.integrations.sb3 import to_sb3 as _to_sb3

    return _to_sb3(vec)
