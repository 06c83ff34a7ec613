"""Backend options, declared once: name, default, what is accepted, and a description.

Each backend lists its own (:attr:`DeszooVecEnv.options <deszoo.vector.base.DeszooVecEnv>`)
besides the options every backend takes (:data:`deszoo.vector.base.COMMON_OPTIONS`);
:func:`deszoo.vector.make_vec` checks what it is given against those declarations, so a
new backend needs no change there. A wrong value is a ``ConfigError`` that names the
option, the value and what is accepted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deszoo.core.config import is_int
from deszoo.errors import ConfigError

__all__ = ["Option", "check_options", "option"]


@dataclass(frozen=True)
class Option:
    """One keyword argument of a backend.

    Attributes:
        name: the keyword.
        default: its value when it is not given.
        expects: what is accepted, in words (for messages and docs).
        accepts: the check (``value -> bool``).
        doc: one line for the documentation.
    """

    name: str
    default: Any
    expects: str
    accepts: Callable[[Any], bool]
    doc: str

    def check(self, value: Any, where: str) -> Any:
        """``value`` if accepted, else ``ConfigError`` naming the option."""
        if not self.accepts(value):
            raise ConfigError(f"{where}: {self.name}={value!r} must be {self.expects}")
        return value


def _number(v: Any) -> bool:
    return (is_int(v) or isinstance(v, float)) and math.isfinite(v)


_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "int": ("an int", is_int),
    "number": ("a number", _number),
    "bool": ("a bool", lambda v: isinstance(v, bool)),
    "str": ("a str", lambda v: isinstance(v, str)),
    "dict": ("a dict", lambda v: isinstance(v, dict)),
    "list": ("a list", lambda v: isinstance(v, (list, tuple))),
}


def option(
    name: str,
    default: Any,
    kind: str,
    doc: str,
    *,
    minimum: float | None = None,
    positive: bool = False,
    choices: Sequence[Any] = (),
    none: bool = False,
    note: str = "",
) -> Option:
    """An :class:`Option` of a ``kind`` (``"int"``, ``"number"``, ``"bool"``, ``"str"``,
    ``"dict"``, ``"list"`` or ``"choice"`` of ``choices``), maybe bounded, maybe ``None``;
    ``note`` is added to what is expected."""
    if kind == "choice":
        expects = "one of " + ", ".join(repr(c) for c in choices)

        def base(v: Any) -> bool:
            return any(type(v) is type(c) and v == c for c in choices)
    else:
        expects, base = _KINDS[kind]
    if positive:
        expects += " > 0"
    elif minimum is not None:
        expects += f" >= {minimum:g}"

    def accepts(v: Any) -> bool:
        if v is None:
            return none
        if not base(v):
            return False
        if positive and not v > 0:
            return False
        return minimum is None or v >= minimum

    if none:
        expects = "None or " + expects
    if note:
        expects += f" ({note})"
    return Option(name, default, expects, accepts, doc)


def check_options(
    declared: Iterable[Option], given: Mapping[str, Any], where: str,
    elsewhere: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Every declared option's value: the given one, checked, or its default.

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
    return {name: (o.check(given[name], where) if name in given else o.default)
            for name, o in table.items()}
