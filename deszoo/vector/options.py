"""Backend options, declared once: name, default, what is accepted, and a description.

An option is a named :class:`~deszoo.core.params.Param`, the type scenario parameters are
declared with, checked by the same checks (:func:`~deszoo.core.params.integer`,
:func:`~deszoo.core.params.real`, :func:`~deszoo.core.params.choice`, ...)::

    option("timeout", 60.0, SECONDS, "seconds to wait for a worker before it counts as hung")

Each backend lists its own (:attr:`DeszooVecEnv.options <deszoo.vector.base.DeszooVecEnv>`)
besides the options every backend takes (:data:`deszoo.vector.base.COMMON_OPTIONS`);
:func:`deszoo.vector.make_vec` checks what it is given against those declarations, so a
new backend needs no change there. A wrong value is a ``ConfigError`` that names the
option, the value and what is accepted; NumPy scalars are accepted and made plain Python
ones (``np.float32(1.0)`` the float ``1.0``). A check that spans options (``batch_size``
against the workers) is a :class:`~deszoo.core.params.Rule` declared with the option it
belongs to (``option(..., rules=(Rule(...),))``); the vector env runs them
(:func:`check_rules`) once the worker count is known.

Bounds: every number option has one on both sides, so that no value reaches a
``time.sleep`` or a deadline that overflows or never comes: timeouts are
:data:`SECONDS` (1 ms to 10**6 s, about 11.6 days), ``close_timeout`` 0 to 10**6 s,
``spin_us`` 0 to 10**6 us.
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

# The shortest and longest timeout an option takes: below a millisecond no worker answers
# in time (5e-324 s made every reset fail), past 10**6 s a deadline is of no use and
# large values overflow where they become a C timeout (2**63 did in close()).
MIN_SECONDS = 1e-3
MAX_SECONDS = 1e6
SECONDS = real(MIN_SECONDS, MAX_SECONDS)
MAX_SPIN_US = 1e6  # a second of polling: past it a worker might as well sleep

# An option is a named Param (the name this module used before; one type for both).
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
        name: the keyword.
        default: its value when it is not given.
        check: a check of :mod:`deszoo.core.params` (``real(1e-3, 1e6)``,
            ``optional(integer(1))``, ...), or a shorthand for one: ``"int"``,
            ``"number"``, ``"bool"``, ``"str"``, ``"dict"``, ``"list"`` or ``"choice"``
            (of ``choices``), bounded by ``minimum``/``maximum`` or ``positive``.
        doc: one line for the documentation.
        none: ``None`` is accepted too.
        note: added to what is expected, in parentheses.
        rules: checks that relate this option to others (see :func:`check_rules`).
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
    """Every declared option's value: the given one, checked (NumPy scalars made plain
    Python ones), or its default.

    Args:
        declared: the options the backend takes.
        given: what the caller passed.
        where: the call, for messages (``"make_vec(backend='shm')"``).
        elsewhere: option name -> other backends that take it, to say so when this one
            does not.
    """
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
