"""Faults of a vector env: repairs, then the errors raised or logged (``on_error``), and
each env's seed, from which restarted envs draw theirs."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from deszoo import errors as _errors
from deszoo.core.config import check_first_seed, check_seed, is_int
from deszoo.errors import ConfigError, SubEnvError, VectorEnvError
from deszoo.vector._host import Call, EnvFailure, restart_seed
from deszoo.vector.batch import Batch
from deszoo.vector.pool import Reply, RestartFailed, WorkerPool, sigint_deferred

__all__ = ["Faults"]

log = logging.getLogger("deszoo.vector")

# Errors of call/get_attr/set_attr re-raised in the parent as their own type.
_CALL_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (AttributeError, TypeError, ValueError, KeyError, IndexError, NotImplementedError)
}
_CALL_ERRORS.update(
    (name, getattr(_errors, name)) for name in _errors.__all__
    if name not in ("SubEnvError",) and issubclass(getattr(_errors, name), ValueError)
)


class Faults:
    """Repairs and reports for a vector env's pool and batch.

    Args:
        pool: the workers.
        batch: the rows (restarted envs are marked there).
        on_error: ``"raise"`` or ``"restart"`` (log instead of raising).
        seed: the seed of the first reset without one (env ``i`` gets ``seed + i``).
        fail: called with an error that ends the vector env (it raises it).
    """

    def __init__(self, pool: WorkerPool, batch: Batch, on_error: str, seed: int | None,
                 fail: Callable[[Exception], None]):
        self.pool = pool
        self.batch = batch
        self.same_step = batch.same_step
        self.num_sims = batch.num_sims
        self.on_error = on_error
        # Weakly: the vector env holds this object, and a cycle would keep an unclosed
        # vector env (and its envs) alive until a garbage collection, not until dropped.
        self._fail = weakref.WeakMethod(fail)
        self.base_seed = None if seed is None else int(seed)
        self.sim_seeds: list[int | None] = [None] * self.num_sims
        self.restarts = np.zeros(self.num_sims, dtype=np.int64)
        # Attributes set on each env (set_attr, call_envs): a replaced worker's envs get them.
        self.attrs: list[dict[str, Any]] = [{} for _ in range(self.num_sims)]
        self.reset_once = False
        self.hook: Callable[[str], None] | None = None

    def seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        """Per-env seeds of a ``reset``: env ``i`` gets ``seed + i``."""
        if seed is None and not self.reset_once:
            seed = self.base_seed
        if seed is None:
            seeds: list[int | None] = [None] * self.num_sims
        elif is_int(seed):
            check_first_seed(seed, self.num_sims, "reset")
            seeds = [int(seed) + i for i in range(self.num_sims)]
        elif isinstance(seed, (list, tuple, np.ndarray)):
            seeds = [None if s is None else s for s in seed]
            if len(seeds) != self.num_sims or not all(s is None or is_int(s) for s in seeds):
                raise ConfigError(
                    f"reset(seed=...) got {len(seeds)} seeds; expected an int or one int (or "
                    f"None) per env ({self.num_sims})"
                )
            seeds = [None if s is None else int(s) for s in seeds]
        else:
            raise ConfigError(f"seed={seed!r} must be an int, a list of ints or None")
        for s in seeds:
            check_seed(s, "reset")
        self.reset_once = True
        # Restarted envs derive their seeds from these; unseeded envs stay unseeded.
        self.sim_seeds = [
            s if s is not None else old for s, old in zip(seeds, self.sim_seeds, strict=True)
        ]
        return seeds

    def next_seed(self, sim: int) -> int | None:
        """Seed of a rebuilt env's next episode (a new one for each restart)."""
        self.restarts[sim] += 1
        return restart_seed(self.sim_seeds[sim], int(self.restarts[sim]))

    def handle(self, replies: Sequence[Reply], command: str) -> list[Exception]:
        """Repair what failed in ``replies`` (a lost worker replaced, an env that raised
        rebuilt; their rows truncated and ``restarted``); return the errors."""
        if self.hook is not None:
            self.hook("handle")
        errors: list[Exception] = []
        reset_now = self.same_step or command == "reset"
        held = command == "call"  # no rows to report it: the next step does
        for r in sorted(replies, key=lambda r: r.worker):
            w = self.pool.workers[r.worker]
            if r.kind in ("died", "hung"):
                errors.append(self.pool.lost(w, r))
                seeds = [self.next_seed(s) for s in w.sims]
                self.restart_worker(w, seeds, reset_now)
                self.batch.mark_restarted(list(w.sims), reset_now, held)
                continue
            broken = [f for f in r.failures if not f.intact]
            if broken:
                errors.append(self.sub_env_error(broken))
                seeds = {f.env_index: self.next_seed(f.env_index) for f in broken}
                again = self.pool.exchange([w], "rebuild", (seeds, reset_now))[w.index]
                if again.kind in ("died", "hung"):  # the worker went too: replace it
                    errors.append(self.pool.lost(w, again))
                    every = [seeds[s] if s in seeds else self.next_seed(s) for s in w.sims]
                    self.restart_worker(w, every, reset_now)
                    self.batch.mark_restarted(list(w.sims), reset_now, held)
                    continue
                if again.kind != "ok" or again.failures:
                    first = errors[-1]  # the failure that asked for the rebuild
                    if again.failures:
                        f = min(again.failures, key=lambda f: f.env_index)
                        why = (f"{f.error_type}: {f.message}\nworker traceback:\n"
                               f"{f.traceback}")
                    else:
                        why = again.kind
                    exc = VectorEnvError(f"env(s) {sorted(seeds)} could not be rebuilt after "
                                         f"a failure; the new env failed too: {why}")
                    exc.__cause__ = first
                    self.failed(exc)
                self.batch.mark_restarted(sorted(seeds), reset_now)
        return errors

    def failed(self, exc: Exception) -> None:
        """The vector env cannot go on: it moves to FAILED and ``exc`` is raised."""
        fail = self._fail()
        if fail is not None:
            fail(exc)
        raise exc

    def restart_worker(self, w: Any, seeds: list, reset_now: bool) -> None:
        by_name: dict[str, dict[int, Any]] = {}  # attribute -> {env: its value}
        for s in w.sims:
            for name, value in self.attrs[s].items():
                by_name.setdefault(name, {})[s] = value
        setters = [Call("set", name, tuple(got), values=tuple(got.values()))
                   for name, got in by_name.items()]
        try:
            self.pool.restart(w, seeds, reset_now, setters)
        except RestartFailed as exc:
            self.failed(exc)

    def remember(self, call: Call, sims: Sequence[int], failures: Sequence[EnvFailure]) -> None:
        """The values a ``set`` call gave envs ``sims`` (but those in ``failures``); other
        calls set nothing."""
        if call.kind != "set":
            return
        failed = {f.env_index for f in failures}
        for s, value in zip(sims, call.values, strict=True):
            if s not in failed:
                self.attrs[s][call.name] = value

    def report(self, replies: Sequence[Reply], command: str,
               settled: Callable[[], None] | None = None) -> None:
        """Handle faults, then raise (bad input always; faults with ``on_error="raise"``,
        the call's results in ``.results``) or log them. ``settled`` runs once they are
        handled, with Ctrl-C still held off."""
        for r in replies:
            if r.kind != "ok" or r.failures:
                break
        else:
            if settled is not None:
                settled()
            return
        # Ctrl-C waits for the repairs: cut short, faults not yet reached were lost.
        with sigint_deferred():
            self.pool.forget(replies)  # (kept by the caller until now; a repair collects anew)
            errors = self.handle(replies, command)
            if settled is not None:
                settled()
        bad_input = [f for r in replies for f in r.failures if f.intact]
        if bad_input:
            raise self.with_results(self.sub_env_error(bad_input), command)
        if not errors:
            return
        if self.on_error == "raise":
            exc = errors[0]
            if len(errors) > 1:
                exc.args = (f"{exc.args[0]} ({len(errors) - 1} more fault(s) in this call)",)
            raise self.with_results(exc, command)
        for exc in errors:
            log.warning("%s; restarted (on_error='restart')", str(exc).splitlines()[0])

    def with_results(self, exc: Exception, command: str) -> Exception:
        """Attach what the call would have returned (``(obs, infos)`` for a reset)."""
        if command == "step":
            exc.results = self.batch.results()  # type: ignore[attr-defined]
        elif command == "reset":
            obs, _, _, _, infos = self.batch.results()
            exc.results = (obs, infos)  # type: ignore[attr-defined]
        return exc

    def sub_env_error(self, failures: Sequence[EnvFailure]) -> SubEnvError:
        failures = sorted(failures, key=lambda f: f.env_index)
        first = failures[0]
        more = f" ({len(failures) - 1} more env(s) failed too)" if len(failures) > 1 else ""
        return SubEnvError(
            f"env {first.env_index} raised {first.error_type}: {first.message}{more}\n"
            f"worker traceback:\n{first.traceback}",
            env_index=first.env_index,
            error_type=first.error_type,
            worker_traceback=first.traceback,
        )

    def call_error(self, failures: Sequence[EnvFailure]) -> Exception:
        """A refused ``call``'s error, of the first env's own type where it is a standard
        or deszoo one."""
        f = min(failures, key=lambda f: f.env_index)
        cls = _CALL_ERRORS.get(f.error_type)
        if cls is not None:
            return cls(f"env {f.env_index}: {f.message}")
        return self.sub_env_error(failures)
