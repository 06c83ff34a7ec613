"""The versioned schema of a benchmark result file, and its validator.

The field tables below are the schema: :func:`validate` checks a result against them and
``docs/benchmarks.md`` documents them (a test keeps the two in step). A change that removes
or changes the meaning of a field bumps :data:`SCHEMA`; adding an optional field does not.
A field that every new file must carry bumps it too, and names the version it came with
(``since``): files of an older version in :data:`READS` are still read without it.

Versions: ``deszoo.bench/1`` (2026-12-02), ``deszoo.bench/2`` adds the top-level
``deszoo_version`` and ``commit`` (which code measured).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass
from typing import Any

from deszoo.bench.work import Work, work_hash

__all__ = [
    "FIELDS",
    "MACHINE_FIELDS",
    "ROW_FIELDS",
    "READS",
    "SCHEMA",
    "SchemaError",
    "WORK_FIELDS",
    "check",
    "markdown",
    "results_work_hash",
    "validate",
]

SCHEMA = "deszoo.bench/2"
"""Name and version of the result format (the ``schema`` field of every file)."""

READS = ("deszoo.bench/1", SCHEMA)
"""Versions :func:`validate` accepts: an older file lacks the fields added since."""


def _version_number(schema: str) -> int:
    return int(schema.rsplit("/", 1)[1])


class SchemaError(ValueError):
    """A result file does not follow the schema; ``errors`` lists every problem."""

    def __init__(self, where: str, errors: list[str]):
        self.where = where
        self.errors = errors
        super().__init__(f"{where}: " + "; ".join(errors))


NUM = (int, float)
OPT_NUM = (int, float, type(None))
OPT_STR = (str, type(None))


@dataclass(frozen=True)
class Field:
    name: str
    types: tuple
    doc: str
    required_ok: bool = False  # must not be null in a row whose status is "ok"
    optional: bool = False  # may be absent: fields added after a version came out
    since: int = 1  # schema version that made it required; older files may lack it


def _f(name: str, types, doc: str, required_ok: bool = False, optional: bool = False,
       since: int = 1) -> Field:
    types = types if isinstance(types, tuple) else (types,)
    return Field(name, types, doc, required_ok, optional, since)


FIELDS = [
    _f("schema", str, f"Format and version, `{SCHEMA}` (also read: "
       f"{', '.join(f'`{v}`' for v in READS if v != SCHEMA)})."),
    _f("created", str, "When the run finished, ISO 8601 in UTC."),
    _f("command", str, "The command line that produced the file."),
    _f("deszoo_version", str, "`deszoo.__version__` of the code that ran.", since=2),
    _f("commit", str, "Short git hash of the deszoo checkout that ran (`+dirty`: tracked "
       "files changed); `unknown` outside a git checkout (e.g. from a wheel).", since=2),
    _f("suite", str, "`quick`, `standard` (the leaderboard's), `autotune` or `custom`."),
    _f("machine", dict, "Where it ran; see the machine table."),
    _f("settings", dict, "`repeats`, `warmup_fraction`, `interleave` (repeats alternated "
       "between the rows of a work and `num_envs`), and the `modes`, `num_envs` and "
       "`num_workers` that ran."),
    _f("works", dict, "Every work definition used, keyed by its work hash; see the work table."),
    _f("work_hash", str, "Hash of the sorted work hashes of all rows: equal files did equal work."),
    _f("rows", list, "One entry per configuration; see the row table."),
]

MACHINE_FIELDS = [
    _f("label", OPT_STR, "Free-form name given with `--label`, or null."),
    _f("cpu_model", str, "CPU model name (`/proc/cpuinfo`)."),
    _f("usable_cores", int, "Cores this process may use (CPU affinity)."),
    _f("logical_cpus", (int, type(None)), "Logical CPUs of the machine."),
    _f("memory_gib", OPT_NUM, "Physical memory in GiB."),
    _f("os", str, "`platform.platform()`."),
    _f("python", str, "Python version."),
    _f("python_implementation", str, "`CPython`, `PyPy`, ..."),
    _f("packages", dict, "Versions of deszoo, simpy, pettingzoo, gymnasium, numpy, supersuit, "
       "ray (null: not installed)."),
    _f("load_average_start", (list, type(None)), "1/5/15-minute load average before the run."),
    _f("load_average_end", (list, type(None)), "The same after the run: a busy machine shows."),
    _f("free_cores_start", OPT_NUM, "Cores free before the run: CPU seconds one spinning "
       "process per usable core got in 0.25 s, over 0.25 s (idle: `usable_cores`)."),
    _f("free_cores_end", OPT_NUM, "The same after the run."),
]

WORK_FIELDS = [
    _f("scenario", str, "Registered scenario name."),
    _f("preset", str, "Scenario preset."),
    _f("env_steps", int, "Total env steps of a row (split over its envs, rounded up)."),
    _f("seed", int, "Env `i` is reset with `seed + i`; the policy generator uses `seed`."),
    _f("env_kwargs", dict, "Extra scenario arguments."),
    _f("policy", str, "Policy name and version."),
]

ROW_FIELDS = [
    _f("scenario", str, "Scenario name."),
    _f("preset", str, "Scenario preset."),
    _f("mode", str, "`serial`, or a `deszoo.vector` backend (`roundrobin`, `supersuit`, "
       "`shm`, `ray`)."),
    _f("num_envs", int, "Envs sampled (not agent rows)."),
    _f("num_workers", int, "Worker processes; 0 for modes that run in the parent."),
    _f("work_hash", str, "Key of this row's work in `works`."),
    _f("status", str, "`ok`, or `error` (then `error` says why and the figures are null)."),
    _f("error", OPT_STR, "The exception, for a failed row."),
    _f("n_agents", (int, type(None)), "Agents (rows of the vector env) per env."),
    _f("steps_per_env", (int, type(None)), "Steps each env takes per repeat."),
    _f("env_steps", (int, type(None)), "Env steps per repeat (`steps_per_env * num_envs`).",
       True),
    _f("repeats", int, "Timed repeats."),
    _f("warmup_steps", int, "Untimed steps per env before the repeats."),
    _f("setup_s", OPT_NUM, "Seconds to build the envs or start the workers (untimed)."),
    _f("wall_s", list, "Wall seconds of each repeat."),
    _f("cpu_s", list, "Parent CPU seconds (`time.process_time`) of each repeat."),
    _f("harness_s", list, "Seconds of each repeat spent choosing actions and logging rewards "
       "(inside `wall_s`)."),
    _f("env_steps_per_s", OPT_NUM, "Median env steps per wall second.", True),
    _f("env_steps_per_s_min", OPT_NUM, "Slowest repeat.", True),
    _f("env_steps_per_s_max", OPT_NUM, "Fastest repeat.", True),
    _f("spread", OPT_NUM, "`(max - min) / median` of env-steps/s over repeats.", True),
    _f("agent_steps_per_s", OPT_NUM, "`env_steps_per_s * n_agents`: agent rows per second.",
       True),
    _f("sim_time_per_s", OPT_NUM, "Simulated time advanced, summed over envs, per wall second."),
    _f("events_per_s", OPT_NUM, "SimPy events processed per wall second."),
    _f("speedup_vs_serial", OPT_NUM, "`env_steps_per_s` over serial's (same work, same "
       "`num_envs`); with odd repeats, serial's median wall over this row's."),
    _f("parallel_efficiency", OPT_NUM, "`speedup_vs_serial / max(num_workers, 1)`."),
    _f("parent_cpu_us_per_step", OPT_NUM, "Median parent CPU microseconds per env step.", True),
    _f("harness_us_per_step", OPT_NUM, "Median policy and logging microseconds per env step.",
       True),
    _f("worker_processes", (int, type(None)), "Child processes of this row alive at its end "
       "(not multiprocessing's resource tracker): 0 for a backend that runs in the parent."),
    _f("parent_peak_rss_mb", OPT_NUM, "Peak RSS of the parent (MiB) during the row (with "
       "`interleave`: its group of rows)."),
    _f("worker_peak_rss_mb", OPT_NUM, "Largest peak RSS of one worker (MiB), null if none."),
    _f("workers_peak_rss_mb_total", OPT_NUM, "Sum of the workers' peak RSS (MiB)."),
    _f("rss_method", str, "`proc` (VmHWM per process), `rusage` (getrusage) or `none`."),
    _f("reward_sum", OPT_NUM, "Sum of all rewards of a repeat: equal across modes when "
       "they follow the same trajectories."),
    _f("sim_events", (int, type(None)), "SimPy events per repeat (from the serial run)."),
    _f("sim_time", OPT_NUM, "Simulated time per repeat, summed over envs (serial run)."),
    _f("matches_serial", (bool, type(None)), "`reward_sum` equals serial's (relative 1e-6); "
       "null without a serial reference."),
]


_TYPE_NAMES = {str: "string", int: "integer", float: "number", dict: "object", list: "array",
               bool: "boolean", type(None): "null"}


def _type_name(types: tuple) -> str:
    names = [_TYPE_NAMES[t] for t in types]
    if "integer" in names and "number" in names:
        names.remove("integer")
    return " or ".join(names)


def markdown() -> str:
    """The schema's field tables as Markdown (the part of docs/benchmarks.md between the
    ``schema tables`` markers; regenerate it with this function)."""
    out = []
    sections = [
        ("Top level", FIELDS),
        ("`machine`", MACHINE_FIELDS),
        ("`works[hash]`: a work definition", WORK_FIELDS),
        ("`rows[i]`: one configuration", ROW_FIELDS),
    ]
    for title, fields in sections:
        out += [f"### {title}", "", "| field | type | meaning |", "|---|---|---|"]
        out += [f"| `{f.name}` | {_type_name(f.types)}{_qualifier(f)} | {f.doc} |"
                for f in fields]
        out.append("")
    return "\n".join(out)


def _qualifier(f: Field) -> str:
    if f.optional:
        return " (optional)"
    if f.since > 1:
        return f" (since `/{f.since}`)"
    return ""


def _check_fields(obj: Any, fields: list[Field], where: str, errors: list[str],
                  version: int = _version_number(SCHEMA)) -> None:
    if not isinstance(obj, dict):
        errors.append(f"{where} must be an object, got {type(obj).__name__}")
        return
    for f in fields:
        if f.name not in obj:
            if not f.optional and f.since <= version:
                errors.append(f"{where}: missing field {f.name!r} ({f.doc})")
            continue
        value = obj[f.name]
        ok = isinstance(value, f.types) and not (
            isinstance(value, bool) and bool not in f.types
        )
        if not ok:
            names = " or ".join("null" if t is type(None) else t.__name__ for t in f.types)
            errors.append(
                f"{where}.{f.name}: expected {names}, got {type(value).__name__} {value!r:.40}"
            )


def validate(result: Any) -> list[str]:
    """Every way ``result`` breaks the schema (an empty list when it follows it)."""
    errors: list[str] = []
    if not isinstance(result, dict):
        return [f"a result must be a JSON object, got {type(result).__name__}"]
    schema = result.get("schema")
    if schema not in READS:
        return [f"schema is {schema!r}; this deszoo reads {' and '.join(map(repr, READS))}"]
    _check_fields(result, FIELDS, "result", errors, _version_number(schema))
    if errors:
        return errors
    _check_fields(result["machine"], MACHINE_FIELDS, "machine", errors)
    for key in ("load_average_start", "load_average_end"):
        value = result["machine"].get(key)
        if value is not None and not (len(value) == 3 and all(_finite(x) for x in value)):
            errors.append(f"machine.{key}: expected null or 3 numbers (1, 5, 15 minutes), "
                          f"got {value!r}")
    for key, work in result["works"].items():
        before = len(errors)
        _check_fields(work, WORK_FIELDS, f"works[{key!r}]", errors)
        if len(errors) == before and work_hash(work) != key:
            errors.append(
                f"works[{key!r}]: the work definition hashes to {work_hash(work)!r}, not to its "
                "key (the file was edited or written by a different hash function)"
            )
    for i, row in enumerate(result["rows"]):
        where = f"rows[{i}]"
        before = len(errors)
        _check_fields(row, ROW_FIELDS, where, errors)
        if len(errors) > before:
            continue
        if row["status"] not in ("ok", "error"):
            errors.append(f"{where}.status: expected 'ok' or 'error', got {row['status']!r}")
        if row["work_hash"] not in result["works"]:
            errors.append(f"{where}.work_hash {row['work_hash']!r} is not a key of works")
        else:
            work = result["works"][row["work_hash"]]
            for key in ("scenario", "preset"):
                if work.get(key) != row[key]:
                    errors.append(f"{where}.{key} {row[key]!r} differs from its work's "
                                  f"{work.get(key)!r}")
        if row["status"] == "ok":
            for f in ROW_FIELDS:
                if f.required_ok and row[f.name] is None:
                    errors.append(f"{where}.{f.name} is null in a row with status 'ok'")
            if len(row["wall_s"]) != row["repeats"]:
                errors.append(f"{where}: {len(row['wall_s'])} wall times for "
                              f"{row['repeats']} repeats")
            _check_rates(row, where, errors)
    _check_speedups(result["rows"], errors)
    errors = _merge_rows(errors)
    if not errors:
        expected = results_work_hash(result["rows"])
        if result["work_hash"] != expected:
            errors.append(
                f"work_hash is {result['work_hash']!r} but the rows' works hash to {expected!r}"
            )
    return errors


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _rate(row: dict) -> float | None:
    """The median of the repeats' rates, from the row's steps and wall times."""
    walls = row["wall_s"]
    if not walls or not all(_finite(w) and w > 0 for w in walls) or not row["env_steps"]:
        return None
    return statistics.median(row["env_steps"] / w for w in walls)


def _check_rates(row: dict, where: str, errors: list[str]) -> None:
    """The rates of an ``ok`` row follow from its steps and wall times."""
    rate = _rate(row)
    if rate is None:
        errors.append(f"{where}.wall_s: every wall time must be a positive number")
    elif not (_finite(row["env_steps_per_s"]) and math.isclose(
            row["env_steps_per_s"], rate, rel_tol=1e-3)):
        errors.append(f"{where}.env_steps_per_s {row['env_steps_per_s']!r} is not the median "
                      f"of env_steps / wall_s ({rate:.4g})")


def _check_speedups(rows: list, errors: list[str]) -> None:
    """A speed-up is the row's rate over its serial row's (same work, same ``num_envs``)."""
    serial = {(r["work_hash"], r["num_envs"]): r for r in rows if isinstance(r, dict)
              and r.get("mode") == "serial" and r.get("status") == "ok"}
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or row.get("status") != "ok":
            continue
        ref = serial.get((row.get("work_hash"), row.get("num_envs")))
        speedup = row.get("speedup_vs_serial")
        if ref is None or speedup is None:
            continue
        rate, ref_rate = _rate(row), _rate(ref)
        if rate is None or ref_rate is None:
            continue
        if not (_finite(speedup) and math.isclose(speedup, rate / ref_rate, rel_tol=1e-2)):
            errors.append(f"rows[{i}].speedup_vs_serial {speedup!r} is not its rate over "
                          f"serial's ({rate / ref_rate:.3g})")


def _merge_rows(errors: list[str]) -> list[str]:
    """``rows[0]: x``, ``rows[1]: x`` -> ``rows[0, 1]: x`` (one line per distinct problem)."""
    merged: dict[str, list[str]] = {}
    for e in errors:
        m = re.match(r"rows\[(\d+)\](.*)$", e, re.S)
        key, index = (m.group(2), m.group(1)) if m else (e, None)
        merged.setdefault(key, [])
        if index is not None:
            merged[key].append(index)
    return [f"rows[{', '.join(ix)}]{key}" if ix else key for key, ix in merged.items()]


def check(result: Any, where: str = "result") -> dict:
    """Return ``result`` if it follows the schema, else raise :class:`SchemaError`."""
    errors = validate(result)
    if errors:
        raise SchemaError(where, errors)
    return result


def results_work_hash(rows: list[dict]) -> str:
    """The file-level work hash: hash of the sorted set of row work hashes."""
    return work_hash({"works": sorted({r["work_hash"] for r in rows})})


def work_of(result: dict, row: dict) -> Work:
    """The :class:`Work` a row did."""
    return Work.from_dict(result["works"][row["work_hash"]])
