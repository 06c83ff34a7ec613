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
    choice,
    flag,
    integer,
    named_check,
    optional,
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


def _kind(kind: str, minimum: float | None, maximum: float | None, positive: bool,
          choices: Sequence[Any]) -> Check:
    """The check a ``kind`` shorthand of :func:`option` stands for."""
    if kind == "int":
        return integer(1 if positive else minimum, maximum)
    if kind == "number":
        return real(0 if positive else minimum, maximum, open_min=positive)
    if kind == "choice":
        return choice(*choices)
    if kind == "bool":
        return flag()
    types: dict[str, tuple[str, type | tuple[type, ...]]] = {
        "str": ("a str", str), "dict": ("a dict", dict), "list": ("a list", (list, tuple)),
    }
    if kind not in types:
        raise ValueError(f"unknown option kind {kind!r}")
    words, cls = types[kind]
    return named_check(words, lambda v: isinstance(v, cls))


def option(
    name: str,
    default: Any,
    check: Check | str,
    doc: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    positive: bool = False,
    choices: Sequence[Any] = (),
    none: bool = False,
    note: str = "",
    rules: tuple[Rule, ...] = (),
) -> Param:
    """A backend option: a :class:`~deszoo.core.params.Param` named ``name``.

    Args:
        check: a check of :mod:`deszoo.core.params`, or a shorthand: ``"int"``,
            ``"number"``, ``"bool"``, ``"str"``, ``"dict"``, ``"list"`` or ``"choice"``
            (of ``choices``), bounded by ``minimum``/``maximum`` or ``positive``.
        doc: one line for the documentation.
        none: ``None`` is accepted too.
        note: added to what is expected, in parentheses.
        rules: checks that relate this option to others.
    """
    if isinstance(check, str):
        check = _kind(check, minimum, maximum, positive, choices)
    if none:
        check = optional(check)
    if note:
        inner = check
        check = named_check(f"{inner.expects} ({note})", lambda v: inner(v) is None)
    return Param(default, check, doc, name=name, rules=rules)


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
