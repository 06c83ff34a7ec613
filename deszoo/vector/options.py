"""Backend options: each a named :class:`~deszoo.core.params.Param` (the type scenario
parameters use), declared by its backend and checked by :func:`check_options`; checks that
span options are :class:`~deszoo.core.params.Rule` s beside them. Every number option is
bounded on both sides, so no value reaches a sleep or deadline that overflows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from deszoo.core.params import (
    Check,
    Param,
    Rule,
    check_rules,
    check_value,
    named_check,
    real,
)
from deszoo.errors import ConfigError

__all__ = [
    "MAX_SECONDS",
    "MAX_SPIN_US",
    "MIN_SECONDS",
    "SECONDS",
    "Option",
    "Rule",
    "check_options",
    "check_rules",
    "instance",
    "option",
    "rule",
]

# Timeouts: below 1 ms no worker answers (5e-324 s failed every reset); past 10**6 s a
# deadline is of no use, and 2**63 overflowed a C timeout in close().
MIN_SECONDS = 1e-3
MAX_SECONDS = 1e6
SECONDS = real(MIN_SECONDS, MAX_SECONDS)
MAX_SPIN_US = 1e6  # a second of polling: past it a worker might as well sleep

Option = Param


def option(name: str, default: Any, check: Check, doc: str, *,
           rules: tuple[Rule, ...] = ()) -> Param:
    """A backend option: a :class:`~deszoo.core.params.Param` named ``name``, accepted by
    ``check`` (one of :mod:`deszoo.core.params`); ``doc``: one line for the docs; ``rules``:
    checks that relate it to other options."""
    return Param(default, check, doc, name=name, rules=rules)


def instance(words: str, cls: type | tuple[type, ...]) -> Check:
    """A value of type ``cls`` (``words`` says which, in messages)."""
    return named_check(words, lambda v: isinstance(v, cls))


def check_options(
    declared: Iterable[Param], given: Mapping[str, Any], where: str,
    elsewhere: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Every declared option's value: the given one checked (NumPy scalars made plain), or
    its default. ``where`` names the call in messages; ``elsewhere``: option name -> the
    backends that take it."""
    table = {o.name: o for o in declared}
    for name in given:
        if name not in table:
            others = (elsewhere or {}).get(name)
            also = f" (it is an option of {', '.join(map(repr, others))})" if others else ""
            raise ConfigError(
                f"{where}: {name}={given[name]!r} is not an option of this backend{also}; "
                f"its options: {', '.join(sorted(table))}"
            )
    return {name: (check_value(o, given[name], where) if name in given else o.default)
            for name, o in table.items()}


def rule(uses: tuple[str, ...], words: str) -> Callable[[Callable], Rule]:
    """A decorator that makes a function ``values -> message or None`` a :class:`Rule`."""

    def wrap(fn: Callable[[Mapping[str, Any]], str | None]) -> Rule:
        return Rule(uses, fn, words)

    return wrap
