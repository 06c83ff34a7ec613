"""Argument parsing shared by the command-line modules (``deszoo.cli``, ``deszoo.bench.cli``).

One-line usage errors (``deszoo: error: ...``, exit status 2), argument types (seeds, counts,
scenarios) and the presets of each scenario, for checks and for ``--help``.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

from deszoo.core.config import MAX_SEED
from deszoo.errors import ConfigError

__all__ = [
    "SEED_MAX",
    "SEED_HELP",
    "STALL_SECONDS",
    "ArgumentParser",
    "check_output_path",
    "check_env",
    "check_preset",
    "env_name",
    "error_line",
    "names",
    "positive_float",
    "positive_int",
    "positive_ints",
    "presets_table",
    "scenario",
    "scenario_presets",
    "seed",
    "stdout_broken",
    "stall_watch",
    "stdout_is_closed",
]

SEED_MAX = MAX_SEED
"""Largest seed (the same bound as the Python API's, ``deszoo.core.config.MAX_SEED``)."""

SEED_HELP = f"an integer in 0..{SEED_MAX}"


def error_line(message: str, command: str = "deszoo") -> str:
    """The one line a usage error prints: ``deszoo: error: ...`` and where help is."""
    return f"deszoo: error: {message} (see '{command} --help')"


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` with a one-line error (no usage block) and exit status 2.

    Subparsers made with ``add_subparsers().add_parser`` are of this class too.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, error_line(message, self.prog) + "\n")

    def format_help(self) -> str:
        if callable(self.epilog):  # computed when asked for: it may import every scenario
            self.epilog = self.epilog()
        return super().format_help()


def seed(text: str) -> int:
    """An argparse type: a seed in ``0..SEED_MAX``."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"expected {SEED_HELP}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0."""
    import math

    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def positive_ints(text: str) -> list[int]:
    """An argparse type: comma-separated positive integers, e.g. ``4,8,16`` (a repeated one
    once: it would run the same rows twice)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers, got {text!r}"
        )
    return list(dict.fromkeys(values))


def names(text: str) -> list[str]:
    """An argparse type: comma-separated names (a repeated one once)."""
    values = [x.strip() for x in text.split(",") if x.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return list(dict.fromkeys(values))


def scenario(text: str) -> str:
    """An argparse type: a registered scenario name."""
    from deszoo.registry import list_envs

    if text not in list_envs():
        raise argparse.ArgumentTypeError(
            f"unknown scenario {text!r}; registered: {', '.join(list_envs())}"
        )
    return text


def check_env(text: str) -> None:
    """Raise :class:`ConfigError` unless ``text`` is a registered scenario or a user's env
    ``MODULE:ATTR`` that imports (from the current folder)."""
    from deszoo.episodes import is_user_env
    from deszoo.registry import list_envs

    if is_user_env(text):
        from deszoo.checks import load

        try:
            load(text)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    elif text not in list_envs():
        raise ConfigError(f"unknown scenario {text!r}; registered: {', '.join(list_envs())}; "
                          "or give your own env as MODULE:ATTR")


def env_name(text: str) -> str:
    """An argparse type: a registered scenario name or a user's env as ``MODULE:ATTR``."""
    try:
        check_env(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def scenario_presets(name: str) -> list[str] | None:
    """The presets of scenario ``name`` (or of a user's env ``MODULE:ATTR`` whose class
    declares ``presets``), or ``None`` if its module does not say."""
    from deszoo.episodes import is_user_env, user_presets
    from deszoo.registry import env_module

    if is_user_env(name):
        return user_presets(name)
    presets = getattr(env_module(name).parallel_env, "presets", None)
    return list(presets) if presets else None


def check_preset(name: str, preset: str, option: str = "--preset") -> None:
    """Raise :class:`ConfigError` unless ``preset`` is one of scenario ``name``'s presets."""
    presets = scenario_presets(name)
    if presets is None and ":" in name and preset != "default":
        raise ConfigError(f"argument {option}: {name} declares no presets (a class attribute "
                          f"presets = {{'default': {{}}, ...}}); got {preset!r}")
    if presets is not None and preset not in presets:
        raise ConfigError(
            f"argument {option}: unknown preset {preset!r} for {name}; "
            f"valid: {', '.join(presets)}"
        )


def presets_table() -> str:
    """One line per scenario with its presets, for ``--help``."""
    from deszoo.registry import list_envs

    lines = []
    width = max(len(n) for n in list_envs())
    for name in list_envs():
        try:
            presets = ", ".join(scenario_presets(name) or ["default"])
        except Exception as exc:  # a scenario being written elsewhere may not import yet
            presets = f"(does not import: {type(exc).__name__})"
        lines.append(f"  {name:<{width}}  {presets}")
    return "\n".join(lines)


IMAGE_SUFFIXES = (".png", ".svg", ".pdf", ".jpg", ".jpeg")


def image_file(text: str) -> Path:
    """An argparse type: a picture's file name (``--plot FILE``), not a scenario name that
    argparse took for FILE (``deszoo run --plot jobshop_v0``)."""
    from deszoo.registry import list_envs

    if text in list_envs() or ":" in text:
        raise argparse.ArgumentTypeError(
            f"{text!r} is the env, not a FILE: put it before --plot (deszoo run {text} --plot) "
            "or give --plot a file name (--plot episode.png)"
        )
    path = Path(text)
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no picture suffix; use one of {', '.join(IMAGE_SUFFIXES)}"
        )
    return path


def check_output_path(path: Path, option: str, force: bool | None = None) -> None:
    """Raise :class:`ConfigError` unless ``path`` can be written: its folder exists, and it
    is not a folder itself; with ``force=False``, not an existing file either (the command
    has ``--force`` to replace one)."""
    if path.is_dir():
        raise ConfigError(f"argument {option}: {str(path)!r} is a folder; give a file name")
    if force is False and path.exists():
        raise ConfigError(f"argument {option}: {str(path)!r} exists; pass --force to replace it")
    folder = path.parent
    if not folder.is_dir():
        raise ConfigError(f"argument {option}: folder {str(folder)!r} does not exist")


def stdout_broken() -> bool:
    """Whether stdout is a pipe whose reader has gone (``deszoo run ... | head``)."""
    import select

    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no real file descriptor
        return False


def stdout_is_closed() -> None:
    """After a ``BrokenPipeError`` on stdout: point stdout at ``/dev/null`` so that the
    interpreter's last flush does not fail again (as the Python docs recommend)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor (tests capture stdout)
        pass


STALL_SECONDS = 60.0
"""``deszoo bench`` and ``profile`` say so on stderr when a phase shows no progress this long."""


@contextlib.contextmanager
def stall_watch(command: str, seconds: float = STALL_SECONDS) -> Iterator[Callable[[str], None]]:
    """Yield ``note(what)``, to call at each sign of progress; once none has come for
    ``seconds`` (and every ``seconds`` after), a notice on stderr names the last one: a step
    that never returns must not be a silent hang. Watches nothing outside the main thread
    or without ``SIGALRM``."""
    import signal
    import threading
    import time

    last = {"what": "starting", "at": time.monotonic(), "told": 0}

    def note(what: str) -> None:
        last.update(what=what or last["what"], at=time.monotonic(), told=0)

    if not hasattr(signal, "setitimer") or (threading.current_thread()
                                            is not threading.main_thread()):
        yield note
        return

    def tick(signum: int, frame: object) -> None:
        stuck = time.monotonic() - last["at"]
        if stuck >= seconds * (last["told"] + 1):
            last["told"] += 1
            print(f"\n{command}: no progress for {stuck:.2g} s ({last['what']}): a step that "
                  "never returns stays here (deszoo check MODULE:ATTR finds one); Ctrl-C "
                  "stops it", file=sys.stderr, flush=True)

    old = signal.signal(signal.SIGALRM, tick)
    every = min(1.0, seconds / 4)
    signal.setitimer(signal.ITIMER_REAL, every, every)
    try:
        yield note
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
