"""Scenario parameters, declared once: default, check and documentation together.

A scenario lists its parameters as :class:`Param` objects::

    params = {
        "n_machines": Param(4, integer(1), "machines, one agent each"),
        "utilization": Param(0.95, real(0, open_min=True), "offered load per machine"),
    }

The bridge checks every value when the env is built (a :class:`ConfigError` that names the
parameter, the value and what is expected; non-finite numbers are always refused), hands
the model one :class:`Config` object (``config.n_machines``), and ``deszoo.docs``
generates each scenario's documentation page from the same declarations.

NumPy scalars are converted to plain Python numbers before they are checked (an
``np.uint8(255)`` becomes the int ``255``), so that the bounds hold for the arithmetic the
model does with them: ``np.uint8(255) + 1`` wraps to ``0``, ``255 + 1`` does not. A bound
may depend on other parameters (``real(at_least=Least(...))``), where what a step costs
depends on their ratio: an interval whose ticks a step may run through, at most so many of
them in an episode.

Backend options (:mod:`deszoo.vector.options`) are declared with the same :class:`Param`,
named (``Param(60.0, real(1e-3, 1e6), "...", name="timeout")``), and the same checks. A
check that spans several parameters or options is a :class:`Rule` declared beside them
(``Param(..., rules=(Rule(...),))``), run once each value has passed its own check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from deszoo.errors import ConfigError

__all__ = [
    "Param",
    "Least",
    "Rule",
    "Config",
    "integer",
    "real",
    "fraction",
    "choice",
    "flag",
    "pair",
    "shares",
    "probabilities",
    "int_tuple",
    "optional",
    "named_check",
    "check_all",
    "check_value",
    "check_rules",
    "configure",
    "plain",
    "COMMON",
    "BLACK_DEATH_V0",
]

Check = Callable[[Any], str | None]  # the value -> None if fine, else what is expected
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Least:
    """A lower bound computed from other parameters: ``fn(values)`` (``values`` maps each
    parameter to its value), described by ``words`` in the docs and errors, e.g.
    ``Least("horizon / 100,000", ("horizon",), lambda v: v["horizon"] / 1e5, "...")``.
    ``uses`` names the parameters ``fn`` reads (an error shows their values); ``why`` says
    in a few words what the bound protects."""

    words: str
    uses: tuple[str, ...]
    fn: Callable[[Mapping[str, Any]], float]
    why: str = ""


@dataclass(frozen=True)
class Rule:
    """A check that spans several parameters (or backend options), declared beside them:
    ``fn(values)`` is ``None`` if they fit together, else what is wrong, naming the values
    (``"batch_size=3 must be an int in 1..num_sims (2)"``). ``uses`` names what ``fn``
    reads; ``words`` says the rule in a few words (for the docs)."""

    uses: tuple[str, ...]
    fn: Callable[[Mapping[str, Any]], str | None]
    words: str


@dataclass(frozen=True)
class Param:
    """One scenario parameter or backend option: its default, its check and a one-line
    description; ``name`` for a backend option (a scenario keys its parameters by name
    instead), ``rules`` the checks that relate it to other parameters."""

    default: Any
    check: Check
    doc: str
    name: str = ""
    rules: tuple[Rule, ...] = ()

    @property
    def expects(self) -> str:
        """What the check accepts, in words (for documentation)."""
        return getattr(self.check, "expects", "")

    def accepts(self, value: Any) -> bool:
        """Whether the check accepts ``value`` (NumPy scalars as plain Python ones)."""
        value = plain(value)
        return not _non_finite(value) and self.check(value) is None

    def with_default(self, default: Any) -> Param:
        """The same parameter with another default (a scenario's own ``max_steps``)."""
        return replace(self, default=default)


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v: Any) -> bool:
    return _is_int(v) or (isinstance(v, (float, np.floating)) and math.isfinite(v))


def named_check(expects: str, fn: Callable[[Any], bool]) -> Check:
    """A check from a predicate and what it accepts in words (``expects``), for values the
    helpers below do not cover."""

    def check(value: Any) -> str | None:
        return None if fn(value) else expects

    check.expects = expects
    return check


def _num(x: float) -> str:
    """A bound in words: ``1,000,000`` rather than ``1000000.0``."""
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def integer(minimum: int | None = None, maximum: int | None = None) -> Check:
    """An int (not a bool) in ``[minimum, maximum]``."""
    if minimum is not None and maximum is not None:
        words = f"an int in {_num(minimum)}..{_num(maximum)}"
    elif minimum == 1:
        words = "a positive int"
    elif minimum is not None:
        words = f"an int >= {minimum}"
    else:
        words = "an int"

    low = -INT64_MAX - 1 if minimum is None else minimum
    high = INT64_MAX if maximum is None else maximum  # past int64 no array holds it

    def ok(v: Any) -> bool:
        return _is_int(v) and low <= v <= high

    check = named_check(words, ok)
    check.bounds = (minimum, maximum)
    return check


def real(
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    open_min: bool = False,
    open_max: bool = False,
    at_least: Least | None = None,
) -> Check:
    """A finite number (int or float, not a bool, not NaN or infinite) in the range, and at
    least what ``at_least`` computes from the other parameters (checked by
    :func:`check_all` once every value has passed its own check)."""
    lo = "" if minimum is None else f"{_num(minimum)} {'<' if open_min else '<='} "
    hi = "" if maximum is None else f" {'<' if open_max else '<='} {_num(maximum)}"
    if minimum == 0 and maximum is None and at_least is None:
        words = "a finite number > 0" if open_min else "a finite number >= 0"
    elif lo or hi:
        words = f"a finite number x with {lo}x{hi}"
    else:
        words = "a finite number"
    if at_least is not None:
        words += f"{' and' if lo or hi else ' x with'} x >= {at_least.words}"

    def ok(v: Any) -> bool:
        if not _is_real(v):
            return False
        if minimum is not None and (v <= minimum if open_min else v < minimum):
            return False
        return not (maximum is not None and (v >= maximum if open_max else v > maximum))

    check = named_check(words, ok)
    check.bounds = (None if open_min else minimum, None if open_max else maximum)
    if at_least is not None:
        check.at_least = at_least
    return check


def fraction(closed: bool = False) -> Check:
    """A number in ``[0, 1)`` (``[0, 1]`` when ``closed``)."""
    return real(0, 1, open_max=not closed)


def choice(*values: Any) -> Check:
    """One of ``values``, of the same type (``True`` is not ``1``, nor ``1.0``)."""

    def ok(v: Any) -> bool:
        return any(type(v) is type(c) and v == c for c in values)

    return named_check(f"one of {', '.join(repr(v) for v in values)}", ok)


def flag() -> Check:
    """True or False."""
    return named_check("True or False", lambda v: isinstance(v, (bool, np.bool_)))


def pair(item: Check) -> Check:
    """A pair ``(lo, hi)`` of values that pass ``item``, with ``lo <= hi``."""

    def ok(v: Any) -> bool:
        return (isinstance(v, (tuple, list)) and len(v) == 2
                and all(item(x) is None for x in v) and v[0] <= v[1])

    return named_check(f"a pair (lo, hi) of {_plural(item)}, lo <= hi", ok)


def shares(n: int) -> Check:
    """``n`` finite numbers >= 0 with a positive sum."""

    def ok(v: Any) -> bool:
        return (isinstance(v, (tuple, list)) and len(v) == n
                and all(_is_real(x) and x >= 0 for x in v) and 0 < sum(v) < math.inf)

    return named_check(f"{n} finite numbers >= 0 with a positive sum", ok)


def probabilities(n: int) -> Check:
    """``n`` finite numbers >= 0 that sum to 1 (within 1e-6)."""

    def ok(v: Any) -> bool:
        return (isinstance(v, (tuple, list)) and len(v) == n
                and all(_is_real(x) and x >= 0 for x in v) and abs(sum(v) - 1.0) <= 1e-6)

    return named_check(f"{n} probabilities (finite, >= 0) that sum to 1", ok)


def int_tuple(minimum: int = 1, maximum: int | None = None, max_len: int | None = None) -> Check:
    """A non-empty tuple of ints in ``[minimum, maximum]``, at most ``max_len`` long."""
    item = integer(minimum, maximum)

    def ok(v: Any) -> bool:
        return (isinstance(v, (tuple, list)) and 0 < len(v) <= (max_len or len(v))
                and all(item(x) is None for x in v))

    longest = f" (at most {max_len})" if max_len else ""
    return named_check(f"a non-empty tuple{longest} of {_plural(item)}", ok)


def optional(check: Check) -> Check:
    """``None`` or what ``check`` accepts (with its ``bounds``, if it has them)."""
    wrapped = named_check(f"None or {check.expects}", lambda v: v is None or check(v) is None)
    if hasattr(check, "bounds"):
        wrapped.bounds = check.bounds
    return wrapped


def _plural(check: Check) -> str:
    words = getattr(check, "expects", "values")
    for one, many in (("a positive int", "positive ints"), ("an int", "ints"),
                      ("a finite number", "finite numbers")):
        if words.startswith(one):
            return many + words[len(one):]
    return words


# Parameters every scenario has (the bridge's); a scenario may redeclare one with another
# default: ``"max_steps": COMMON["max_steps"].with_default(1000)``.
COMMON: dict[str, Param] = {}


def _non_finite(value: Any) -> bool:
    """Whether ``value`` is, or holds (in a list, tuple or array), an inf or a NaN."""
    if isinstance(value, (float, np.floating)):
        return not math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return any(_non_finite(v) for v in value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return not np.isfinite(value).all()
    return False


def plain(value: Any) -> Any:
    """``value`` with NumPy scalars made plain Python ones (in lists and tuples too): an
    ``np.uint8(255)`` the int ``255``, an ``np.float32`` a float, an ``np.bool_`` a bool.

    A parameter is checked, and the model computes, with the plain value: NumPy's fixed-
    width arithmetic would wrap (``np.uint8(255) + 1 == 0``) inside the checked bounds.
    """
    if isinstance(value, np.generic):
        return value.item() if isinstance(value, (np.integer, np.floating, np.bool_)) else value
    if isinstance(value, (list, tuple)) and any(isinstance(v, (np.generic, list, tuple))
                                                for v in value):
        return type(value)(plain(v) for v in value)
    return value


def check_all(name: str, params: Mapping[str, Param], values: Mapping[str, Any],
              given: Mapping[str, str] | None = None) -> None:
    """Run every parameter's check; ``ConfigError`` for the first value that fails.

    ``given`` maps a parameter to the name the user gave it by (``max_steps`` given as
    ``max_cycles``), which the error names.
    """
    given = given or {}
    for key, param in params.items():
        value = values[key]
        expects = "finite" if _non_finite(value) else param.check(value)
        if expects is not None:
            raise ConfigError(f"{name}: {given.get(key, key)}={value!r} must be {expects}")
    check_rules(params.values(), values, name)
    for key, param in params.items():  # bounds computed from other parameters
        bound = getattr(param.check, "at_least", None)
        if bound is None or values[key] is None or any(values.get(k) is None
                                                       for k in bound.uses):
            continue  # (a limit being set alone, or a parameter that is None: no bound)
        least = bound.fn(values)
        if values[key] < least:
            uses = ", ".join(f"{k}={values[k]!r}" for k in bound.uses)
            raise ConfigError(
                f"{name}: {given.get(key, key)}={values[key]!r} must be at least "
                f"{bound.words} = {least:.6g} with {uses}"
                + (f" ({bound.why})" if bound.why else "")
            )


def check_value(param: Param, value: Any, where: str, name: str = "") -> Any:
    """``value`` made plain (:func:`plain`) if ``param`` accepts it, else a
    :class:`ConfigError` ``"{where}: {name}={value!r} must be {expects}"``."""
    value = plain(value)
    expects = param.check(value) or ("finite" if _non_finite(value) else None)
    if expects is not None:
        raise ConfigError(f"{where}: {name or param.name}={value!r} must be {expects}")
    return value


def check_rules(params: Iterable[Param], values: Mapping[str, Any], where: str) -> None:
    """Run the :class:`Rule` s of ``params`` over ``values`` (every value already checked on
    its own); ``ConfigError`` ``"{where}: {what the rule says}"`` for the first that fails."""
    for param in params:
        for rule in param.rules:
            wrong = rule.fn(values)
            if wrong is not None:
                raise ConfigError(f"{where}: {wrong}")


class Config(Mapping):
    """The values of a scenario's parameters, as attributes (``config.n_machines``) and as a
    read-only mapping (``config["n_machines"]``). The model gets this one object; it is a
    view of the env's values (the episode limits may be changed with ``set_attr``)."""

    def __init__(self, values: dict[str, Any]):
        # The values dict is the instance's own attribute dict, so ``config.n_machines`` is a
        # plain attribute read (models read parameters on their hot paths) and changes to
        # the env's values show here.
        object.__setattr__(self, "__dict__", values)

    def __getattr__(self, key: str) -> Any:  # only reached for a name that is not a value
        raise AttributeError(f"no parameter {key!r}")

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("parameters are read-only; build a new env to change them")

    def __getitem__(self, key: str) -> Any:
        return self.__dict__[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.__dict__)

    def __len__(self) -> int:
        return len(self.__dict__)

    def __repr__(self) -> str:
        return f"Config({self.__dict__!r})"

    def __reduce__(self):  # a copy or pickle stays a view of the (copied) env's values
        return Config, (self.__dict__,)


COMMON.update({
    "max_steps": Param(None, optional(integer(1, 10**12)),
                       "truncate after this many env steps (None: no limit)"),
    "max_time": Param(None, optional(real(0, 1e12, open_min=True)),
                      "truncate when the simulated clock would pass this time (None: no limit)"),
    "invalid_action": Param("random", choice("random", "raise"),
                            "a masked-out action: replaced by a random legal one and flagged "
                            "(random), or an error (raise)"),
    "invalid_penalty": Param(0.0, real(0, 1e6), "reward charged for each invalid action"),
    "black_death": Param(True, flag(),
                         "agents that leave stay listed, observing zeros with the no-op "
                         "mask, until the episode ends (False: each leaves agents when it "
                         "terminates, PettingZoo's native way)"),
})


# black_death as every v0 scenario was released with it (it is part of the config their score
# entries hash). Where no agent of a scenario leaves it changes nothing.
BLACK_DEATH_V0 = COMMON["black_death"].with_default(False)


def _max_cycles_alias(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Accept PettingZoo's ``max_cycles`` as another name for ``max_steps``."""
    if "max_cycles" not in kwargs:
        return kwargs
    kwargs = dict(kwargs)
    cycles = kwargs.pop("max_cycles")
    if "max_steps" in kwargs and kwargs["max_steps"] != cycles:
        raise ConfigError(
            f"{name}: max_cycles={cycles!r} and max_steps={kwargs['max_steps']!r} disagree; "
            "they are two names of one limit, give one"
        )
    kwargs["max_steps"] = cycles
    return kwargs


def configure(
    name: str,
    params: Mapping[str, Param],
    presets: Mapping[str, Mapping[str, Any]],
    preset: Any,
    kwargs: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A scenario's values: its defaults, overridden by the preset, then by ``kwargs``.

    Returns ``(config, kwargs)`` (``kwargs`` with ``max_cycles`` renamed ``max_steps``);
    raises :class:`ConfigError` for an unknown preset or argument, or a value a check
    refuses.
    """
    if not isinstance(preset, str) or preset not in presets:
        raise ConfigError(f"{name}: unknown preset {preset!r}; valid presets: {sorted(presets)}")
    unknown = sorted(set(kwargs) - {"max_cycles"} - set(params))
    if unknown:
        raise ConfigError(
            f"{name}: unknown argument(s) {unknown}; valid arguments: render_mode, "
            f"preset, mask_in_obs, max_cycles, {', '.join(sorted(params))}"
        )
    given = {"max_steps": "max_cycles"} if "max_cycles" in kwargs else {}
    kwargs = _max_cycles_alias(name, kwargs)
    config = {**{k: p.default for k, p in params.items()}, **presets[preset],
              **{k: plain(v) for k, v in kwargs.items()}}
    if config["invalid_action"] == "noop":
        raise ConfigError(
            f"{name}: invalid_action='noop' was removed: it left the agent waiting, which "
            "froze simulated time; use 'random' (the default: a random legal action, "
            "flagged in infos) or 'raise'"
        )
    check_all(name, params, config, given)
    return config, kwargs
