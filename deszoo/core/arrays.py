"""The array protocol: what a vector backend reads and writes of an env.

An env that speaks it keeps one row per possible agent (the padded layout of
:mod:`deszoo.core.groups`) in the arrays of :data:`AGENT_ARRAYS`, and steps with
``step_arrays(acts)``. A backend may replace each array by a view of the same shape and
dtype in its batch buffers (it *adopts* them): the env then writes its results straight into
the batch, so the env must only ever write these arrays in place, never rebind them.

A deszoo :class:`~deszoo.core.SimPyParallelEnv` speaks it natively;
:class:`deszoo.core.adapter.ParallelEnvArrays` gives it to any other PettingZoo env.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from deszoo.core.groups import AgentRows

__all__ = ["AGENT_ARRAYS", "ArrayEnv", "allocate", "is_array_env"]

# env attribute -> (name in a vector env's batch buffers, dtype, trailing shape: "d" is
# the observation width, "k" the mask width, "" a scalar per row)
AGENT_ARRAYS: dict[str, tuple[str, Any, str]] = {
    "obs_buf": ("obs", np.float32, "d"),
    "mask_buf": ("mask", np.int8, "k"),
    "rew_buf": ("rew", np.float32, ""),  # reward of the last step (or reset: 0)
    "term_buf": ("term", np.bool_, ""),  # terminated on the last step
    "trunc_buf": ("trunc", np.bool_, ""),  # truncated on the last step
    "live": ("live", np.bool_, ""),  # in the episode (not departed, episode not over)
    "needs_buf": ("needs", np.bool_, ""),  # at a decision point
    "invalid_buf": ("invalid", np.bool_, ""),  # its last action was invalid and replaced
    "invalid_count": ("invalid_count", np.int32, ""),  # invalid actions this episode
}


@runtime_checkable
class ArrayEnv(Protocol):
    """An env the vector backends can step (see the module docstring)."""

    rows: AgentRows
    obs_buf: np.ndarray
    mask_buf: np.ndarray
    rew_buf: np.ndarray
    term_buf: np.ndarray
    trunc_buf: np.ndarray
    live: np.ndarray
    needs_buf: np.ndarray
    invalid_buf: np.ndarray
    invalid_count: np.ndarray
    num_events: int  # SimPy events processed this episode

    @property
    def episode_over(self) -> bool: ...

    @property
    def now(self) -> float: ...

    def reset_arrays(self, seed: int | None = None) -> None: ...

    def step_arrays(self, acts: np.ndarray, missing: np.ndarray | None = None) -> None: ...

    def close(self) -> None: ...


def allocate(env: Any, rows: AgentRows) -> None:
    """Give ``env`` fresh arrays for ``rows``: zeros, with every row's no-op mask (no
    episode yet, so every agent is out)."""
    n = len(rows.names)
    dims = {"d": (rows.obs_dim,), "k": (rows.mask_dim,), "": ()}
    for attr, (_, dtype, trailing) in AGENT_ARRAYS.items():
        setattr(env, attr, np.zeros((n, *dims[trailing]), dtype=dtype))
    env.mask_buf[:] = rows.noop_mask()


def is_array_env(env: Any) -> bool:
    """Whether ``env`` speaks the array protocol natively."""
    return callable(getattr(env, "step_arrays", None)) and callable(
        getattr(env, "reset_arrays", None)) and hasattr(env, "rows")
