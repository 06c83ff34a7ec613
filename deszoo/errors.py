"""Typed errors raised by deszoo.

Every error about bad input is a subclass of :class:`ValueError`, so callers that
already catch ``ValueError`` keep working, and tests can match the exact type.
"""

from __future__ import annotations

__all__ = [
    "DeszooError",
    "ConfigError",
    "UnknownAgentError",
    "MissingActionError",
    "InvalidActionError",
    "MaskedActionError",
    "ResetNeededError",
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
