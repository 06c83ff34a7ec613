"""Typed errors raised by deszoo.

Every error about bad input is a subclass of :class:`ValueError`, so callers that
already catch ``ValueError`` keep working, and tests can match the exact type.
"""

from __future__ import annotations

from gymnasium import error as _gym

__all__ = [
    "DeszooError",
    "ConfigError",
    "UnknownAgentError",
    "MissingActionError",
    "InvalidActionError",
    "MaskedActionError",
    "ResetNeededError",
    "ModelError",
    "VectorEnvError",
    "SubEnvError",
    "WorkerDiedError",
    "WorkerTimeoutError",
    "AlreadyPendingCallError",
    "NoAsyncCallError",
    "ClosedEnvironmentError",
    "MasksIgnoredWarning",
]


class DeszooError(Exception):
    """Base class of every deszoo error."""


class ConfigError(DeszooError, ValueError):
    """An unknown constructor argument, an unknown preset or a bad parameter value."""


class UnknownAgentError(DeszooError, ValueError):
    """An action was given for an agent that is not live in the episode."""


class MissingActionError(DeszooError, ValueError):
    """An agent at a decision point got no action."""


class InvalidActionError(DeszooError, ValueError):
    """An action outside the agent's action space (wrong type, shape or range)."""


class MaskedActionError(InvalidActionError):
    """An action inside the space that the agent's current action mask forbids."""


class ResetNeededError(DeszooError, RuntimeError):
    """``step`` was called before ``reset`` or after the episode ended."""


class ModelError(DeszooError, ValueError):
    """The model handed the bridge something that does not fit: a mask, an observation, a
    reward or decision values of the wrong shape or kind (the message names the agent, the
    buffer, and the expected and received shapes)."""


# ---- vector backends (deszoo.vector) ---------------------------------------------------
class VectorEnvError(DeszooError, RuntimeError):
    """A vector env cannot go on: a sub-env raised, a worker died or hung, or it is closed."""


class SubEnvError(VectorEnvError):
    """An exception inside one sub-env of a vector env, re-raised in the parent.

    Attributes:
        env_index: index of the failing env (``0..num_sims-1``, not a row).
        error_type: class name of the original exception (e.g. ``"MaskedActionError"``).
        worker_traceback: the traceback text from the process that ran the env.
    """

    def __init__(
        self,
        message: str,
        env_index: int | None = None,
        error_type: str | None = None,
        worker_traceback: str = "",
    ):
        super().__init__(message)
        self.env_index = env_index
        self.error_type = error_type
        self.worker_traceback = worker_traceback

    def __reduce__(self):
        return (
            type(self),
            (self.args[0], self.env_index, self.error_type, self.worker_traceback),
        )


class WorkerDiedError(VectorEnvError):
    """A worker process of a vector env exited unexpectedly (killed, crashed)."""


class WorkerTimeoutError(VectorEnvError):
    """A worker process of a vector env gave no answer within the timeout."""


class AlreadyPendingCallError(VectorEnvError, _gym.AlreadyPendingCallError):
    """An async call while the results of the last one are still to be taken (``recv``
    twice without ``send``). Gymnasium's error of the same name, and a deszoo one."""

    def __init__(self, message: str, name: str = "recv"):
        VectorEnvError.__init__(self, message)
        self.name = name


class NoAsyncCallError(VectorEnvError, _gym.NoAsyncCallError):
    """``recv`` with nothing in flight, or ``send`` without a ``recv`` before it."""

    def __init__(self, message: str, name: str = "recv"):
        VectorEnvError.__init__(self, message)
        self.name = name


class ClosedEnvironmentError(VectorEnvError, _gym.ClosedEnvironmentError):
    """A call to a vector env that is closed (or failed: ``close()`` it)."""


class MasksIgnoredWarning(UserWarning):
    """A policy's actions are often masked out (and replaced): it is not reading the masks.

    Issued once per process and scenario. Silence it with
    ``warnings.filterwarnings("ignore", category=MasksIgnoredWarning)`` in this process, or
    with the environment variable ``DESZOO_WARN_MASKS=0`` in every process (vector workers
    included).
    """
