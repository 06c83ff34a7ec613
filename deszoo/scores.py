"""Scores: policies evaluated on held-out seeds, stored as JSON entries, rendered as a page.

An entry (one file in ``benchmarks/scores/``) holds one policy's episode returns (summed
over agents) on one scenario and preset, one episode per held-out seed, their mean and a
95% t-interval, how long the policy trained, and a *work hash* over what was evaluated
(scenario, version, preset, the resolved scenario config and the seeds), so that entries
compare only on the same work. ``python -m deszoo.scores`` writes ``docs/scores.md`` from
the entries (``--check``: fail if it is out of date), with the aggregates across tasks of
:mod:`deszoo.aggregates` and their performance-profile plot; ``--marl-eval FILE`` exports the
entries for marl-eval; ``deszoo scores`` adds an entry.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deszoo import __version__
from deszoo.bench.work import work_hash
from deszoo.policies import HELD_OUT_SEEDS, Policy, evaluate

__all__ = [
    "SCORED",
    "DEFAULT_DIR",
    "DEFAULT_OUT",
    "FIELDS",
    "LEVEL",
    "SCHEMA",
    "SEEDS",
    "TRAINING_FIELDS",
    "Entry",
    "PolicyFailed",
    "checked_policy",
    "entry_path",
    "load",
    "render",
    "score",
    "score_work",
    "t_interval",
    "t_quantile",
    "validate",
    "write_docs",
    "write_profiles",
]

SCHEMA = "deszoo.scores/1"
"""Name and version of the entry format (the ``schema`` field of every entry)."""

SCORED = ("elevator_v0", "jobshop_v0", "loadbalance_v0", "ridehail_v0", "supplychain_v0",
          "traffic_v0", "warehouse_v0")
"""The first version of each scenario: every one has MaskablePPO and, on small, the PPO loop
(tests/test_scores.py). Every registered version has random, heuristic and a learner."""

SEEDS: tuple[int, ...] = tuple(HELD_OUT_SEEDS)
"""The held-out evaluation seeds (10000..10019): training uses sims seeded from 0 up."""

LEVEL = 0.95
"""Confidence level of the t-interval."""

DEFAULT_DIR = Path("benchmarks/scores")
DEFAULT_OUT = Path("docs/scores.md")


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (Lentz's method)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                    -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile of Student's t distribution with ``df`` degrees of freedom."""
    if not 0.0 < p < 1.0 or df < 1:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df >= 1, got p={p!r}, df={df!r}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):  # bisection: the CDF is monotone
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-12:
            break
    return 0.5 * (lo + hi)


def t_interval(returns: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Two-sided t confidence interval for the mean of ``returns`` (at least 2 values)."""
    x = np.asarray(returns, dtype=float)
    if x.size < 2:
        raise ValueError(f"a t-interval needs at least 2 returns, got {x.size}")
    half = t_quantile(0.5 + level / 2.0, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size)
    return float(x.mean() - half), float(x.mean() + half)


# ---- a user's policy -------------------------------------------------------------------
class PolicyFailed(Exception):
    """A policy given as ``MODULE:ATTR`` raised (the cause), or returned what is not one
    action per row."""


def checked_policy(fn: Any, spec: str) -> Policy:
    """``fn`` (named ``spec``, e.g. ``"my.module:act"``) as a policy whose failures name it.

    Raises :class:`~deszoo.errors.ConfigError` now if ``fn`` cannot be called with
    ``(obs, mask)``; the policy returned raises :class:`PolicyFailed` when a call raises or
    returns what is not one int per row (the actions as int64, as :func:`evaluate` takes
    them).
    """
    import inspect

    from deszoo.errors import ConfigError

    try:
        inspect.signature(fn).bind(None, None)
    except TypeError as exc:
        raise ConfigError(f"argument POLICY: {spec} cannot be called as policy(obs, mask): "
                          f"{exc}") from None
    except ValueError:  # no signature to read (some builtins): the first call tells
        pass

    def policy(obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        try:
            actions = np.asarray(fn(obs, mask))
        except Exception as exc:
            raise PolicyFailed(f"{spec} raised {type(exc).__name__}: {exc}") from exc
        if actions.shape[:1] != (len(obs),):
            raise PolicyFailed(f"{spec} returned actions of shape {actions.shape}; expected "
                               f"one per row, {len(obs)} rows")
        return actions

    return policy


# ---- the work ---------------------------------------------------------------------------
def score_work(scenario: str, preset: str = "default", seeds: Sequence[int] = SEEDS,
               **env_kwargs: Any) -> dict[str, Any]:
    """What an entry evaluates: scenario, version, preset, resolved config and seeds.

    The config is the scenario's ``env.config`` after the preset and ``env_kwargs`` are
    applied, so two spellings of the same scenario parameters give the same work.
    """
    from deszoo.episodes import env_factory

    env = env_factory(scenario, preset, **env_kwargs)()  # a user's env too (MODULE:ATTR)
    config = json.loads(json.dumps(getattr(env, "config", None) or {}, sort_keys=True,
                                   default=_jsonable))
    env.close()
    match = re.search(r"_v(\d+)$", scenario)
    return {
        "scenario": scenario,
        "version": int(match.group(1)) if match else None,
        "preset": preset,
        "config": config,
        "seeds": [int(s) for s in seeds],
    }


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    raise TypeError(f"config value {value!r} of type {type(value).__name__} is not JSON-able")


# ---- an entry ---------------------------------------------------------------------------
def score(policy: Policy, scenario: str, preset: str = "default", *, name: str,
          seeds: Sequence[int] = SEEDS, source: str = "", training: dict | None = None,
          command: str | None = None, **env_kwargs: Any) -> dict[str, Any]:
    """Evaluate ``policy`` (one episode per seed) and return a scores entry.

    Args:
        policy: ``policy(obs, mask) -> actions`` over the rows of a vector env.
        scenario, preset, env_kwargs: the scenario evaluated.
        name: the policy's name in the table (``random``, ``MaskablePPO``, ...).
        seeds: evaluation seeds, at least 2 (default: the held-out :data:`SEEDS`).
        source: where the policy came from (``builtin:random``, a model path, ...).
        training: ``None`` for an untrained policy, else a dict with at least
            ``algorithm``, ``timesteps`` and ``wall_s`` (see :data:`TRAINING_FIELDS`).
        command: the command line recorded (default: ``sys.argv``).
    """
    work = score_work(scenario, preset, seeds, **env_kwargs)
    start = time.perf_counter()
    returns = evaluate(policy, scenario, work["seeds"], preset=preset, **env_kwargs)
    wall = time.perf_counter() - start
    lo, hi = t_interval(returns, LEVEL)
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command if command is not None else " ".join(sys.argv),
        "deszoo_version": __version__,
        "scenario": scenario,
        "version": work["version"],
        "preset": preset,
        "policy": name,
        "source": source,
        "work": work,
        "work_hash": work_hash(work),
        "seeds": work["seeds"],
        "returns": [float(r) for r in returns],
        "mean": float(np.mean(returns)),
        "ci95": [lo, hi],
        "eval_wall_s": wall,
        "training": training,
    }


def entry_path(entry: dict[str, Any], directory: str | Path = DEFAULT_DIR) -> Path:
    """Where ``entry`` is stored: ``SCENARIO-PRESET-POLICY.json`` in ``directory``
    (``...-POLICY-seedS.json`` for a learner of training seed ``S`` other than 0)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", entry["policy"]).strip("-") or "policy"
    scenario = re.sub(r"[^A-Za-z0-9_.-]+", "-", entry["scenario"])  # MODULE:ATTR
    seed = _train_seed(entry)
    tail = f"-seed{seed}" if seed else ""
    return Path(directory) / f"{scenario}-{entry['preset']}-{slug}{tail}.json"


def _train_seed(entry: dict[str, Any]) -> int:
    return int((entry.get("training") or {}).get("train_seed", 0))


# ---- the schema -------------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    name: str
    types: tuple
    doc: str


_NUM = (int, float)
FIELDS = [
    Field("schema", (str,), f"Format name and version, `{SCHEMA}`."),
    Field("created", (str,), "When the entry was written, ISO 8601 in UTC."),
    Field("command", (str,), "The command line that wrote it."),
    Field("deszoo_version", (str,), "deszoo's version."),
    Field("scenario", (str,), "Registered scenario name (with its version suffix)."),
    Field("version", (int, type(None)), "The scenario's version (null for a user's env "
          "whose name has no `_vN` suffix)."),
    Field("preset", (str,), "Scenario preset."),
    Field("policy", (str,), "The policy's name in the tables."),
    Field("source", (str,), "Where the policy came from: `builtin:random`, a model path, ..."),
    Field("work", (dict,), "What was evaluated: scenario, version, preset, the resolved "
          "config and the seeds."),
    Field("work_hash", (str,), "Hash of `work`: entries compare only on equal hashes."),
    Field("seeds", (list,), "Evaluation seeds, one episode each (as in `work`)."),
    Field("returns", (list,), "Episode return (summed over agents) per seed."),
    Field("mean", _NUM, "Mean of `returns`."),
    Field("ci95", (list,), "95% t-interval of the mean, `[low, high]`."),
    Field("eval_wall_s", _NUM, "Wall seconds of the evaluation."),
    Field("training", (dict, type(None)), "null for an untrained policy; else see "
          "the training table."),
]

NOTE = Field("note", (str,), "Optional: one line the page prints beside the entry, e.g. "
             "why a learner scores below random.")

TRAINING_FIELDS = [
    Field("algorithm", (str,), "e.g. `MaskablePPO (sb3-contrib)`, `examples/ppo_loop.py`."),
    Field("timesteps", (int,), "Rows stepped in training (agent decisions offered)."),
    Field("wall_s", (*_NUM, type(None)), "Wall seconds of training (evaluations for the "
          "curve excluded); null when not given."),
]


def validate(entry: Any) -> list[str]:
    """Every way ``entry`` breaks the schema (an empty list: valid)."""
    if not isinstance(entry, dict):
        return [f"an entry is a JSON object, got {type(entry).__name__}"]
    errors = _fields(entry, FIELDS, "")
    if errors:
        return errors
    if entry["schema"] != SCHEMA:
        errors.append(f"schema {entry['schema']!r}, expected {SCHEMA!r}")
    work = entry["work"]
    if work_hash(work) != entry["work_hash"]:
        errors.append(f"work_hash {entry['work_hash']} is not the hash of work "
                      f"({work_hash(work)})")
    for key in ("scenario", "version", "preset", "seeds"):
        if work.get(key) != entry[key]:
            errors.append(f"{key} {entry[key]!r} differs from work.{key} {work.get(key)!r}")
    returns, seeds = entry["returns"], entry["seeds"]
    if len(returns) != len(seeds) or len(seeds) < 2:
        errors.append(f"{len(returns)} returns for {len(seeds)} seeds (at least 2, one each)")
    elif not all(isinstance(r, _NUM) and math.isfinite(r) for r in returns):
        errors.append("returns must be finite numbers")
    else:
        if not math.isclose(entry["mean"], float(np.mean(returns)), rel_tol=1e-9, abs_tol=1e-9):
            errors.append(f"mean {entry['mean']} is not the mean of returns")
        lo, hi = t_interval(returns, LEVEL)
        ci = entry["ci95"]
        if len(ci) != 2 or not all(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-6)
                                   for a, b in zip(ci, (lo, hi), strict=False)):
            errors.append(f"ci95 {ci} is not the 95% t-interval of returns ({lo}, {hi})")
    if entry["training"] is not None:
        errors += _fields(entry["training"], TRAINING_FIELDS, "training.")
        wall = entry["training"].get("wall_s")
        if isinstance(wall, _NUM) and not (math.isfinite(wall) and wall > 0):
            errors.append(f"training.wall_s {wall!r} must be a positive number of seconds")
    if "note" in entry and not isinstance(entry["note"], str):
        errors.append(f"note is {type(entry['note']).__name__}, expected str")
    return errors


def _fields(d: dict, fields: list[Field], prefix: str) -> list[str]:
    errors = []
    for f in fields:
        if f.name not in d:
            errors.append(f"missing field {prefix}{f.name}")
        elif not isinstance(d[f.name], f.types) or isinstance(d[f.name], bool):
            errors.append(f"{prefix}{f.name} is {type(d[f.name]).__name__}, expected "
                          + " or ".join(t.__name__ for t in f.types))
    return errors


# ---- the page ---------------------------------------------------------------------------
@dataclass
class Entry:
    """A validated entry and the file it came from."""

    path: Path
    data: dict[str, Any]


def load(directory: str | Path = DEFAULT_DIR) -> tuple[list[Entry], list[tuple[Path, list[str]]]]:
    """Every entry in ``directory``: the valid ones on the held-out seeds and default config
    of their scenario and preset, and the rejected ones with the reasons."""
    entries, rejected = [], []
    for path in sorted(Path(directory).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            rejected.append((path, [f"not readable JSON: {exc}"]))
            continue
        errors = validate(data)
        if not errors:
            std = score_work(data["scenario"], data["preset"])
            if data["work_hash"] != work_hash(std):
                errors = [f"work hash {data['work_hash']} is not the standard work's "
                          f"{work_hash(std)} ({data['scenario']}/{data['preset']}, default "
                          f"config, seeds {SEEDS[0]}..{SEEDS[-1]})"]
        (rejected.append((path, errors)) if errors else entries.append(Entry(path, data)))
    return entries, rejected


_ORDER = {"random": 0, "heuristic": 1}


def _cell(d: dict[str, Any]) -> str:
    lo, hi = d["ci95"]
    return f"{d['mean']:.1f} ± {(hi - lo) / 2:.1f}"


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _normaliser(group: list[Entry]) -> tuple[float, float] | None:
    """Random's and the heuristic's mean in ``group`` (one task), if the heuristic is the
    better of the two."""
    by = {e.data["policy"]: e.data["mean"] for e in group}
    if "random" in by and "heuristic" in by and by["heuristic"] > by["random"]:
        return by["random"], by["heuristic"]
    return None


def render(entries: list[Entry]) -> str:
    """``docs/scores.md``: a summary table, the aggregates across tasks, then every entry
    per scenario and preset."""
    from deszoo import list_envs
    from deszoo.aggregates import newest_versions, normalised, paired_difference, render_section

    groups: dict[tuple[str, str], list[Entry]] = {}
    for e in entries:
        groups.setdefault((e.data["scenario"], e.data["preset"]), []).append(e)
    presets = {"small": 0, "default": 1, "large": 2}
    keys = sorted(groups, key=lambda k: (k[0], presets.get(k[1], 9), k[1]))
    names = sorted({e.data["policy"] for e in entries}, key=lambda n: (_ORDER.get(n, 2), n))
    lines = [
        "# Scores",
        "",
        "<!-- Generated by `python -m deszoo.scores --docs` from benchmarks/scores/*.json; "
        "do not edit by hand. -->",
        "",
        f"Mean episode return (summed over agents) ± the half-width of its 95% t-interval, "
        f"one episode on each of the {len(SEEDS)} held-out seeds {SEEDS[0]}..{SEEDS[-1]}, "
        "at the preset's default config. Higher is better. Learned policies act greedily "
        "with the mask (`-sampled`: the same model, sampling its masked distribution) "
        "and were trained on sims seeded from 1000 S up for training seed S (their "
        "autoresets draw from those seeds), never on these seeds. Add an entry with "
        "`deszoo scores POLICY SCENARIO --preset P` (`random`, `heuristic`, `MODULE:ATTR` "
        "or a saved SB3 model); "
        "the learned ones come from `benchmarks/train_baselines.py`; `deszoo scores "
        "--summary DIR` prints the aggregates below for a folder of entries. See "
        "[training.md](training.md). A learned cell shows training seed 0; "
        "[Across tasks](#across-tasks) takes every training seed.",
        "",
    ]
    if not entries:
        return "\n".join([*lines, "No entries yet.", ""])
    lines += ["| scenario | preset | " + " | ".join(names) + " |",
              "|---|---|" + "---:|" * len(names)]
    notes: list[str] = []  # an entry's note: a marker in its cell, the line under the table
    for key in keys:
        by: dict[str, dict[str, Any]] = {}
        for e in sorted(groups[key], key=lambda e: -_train_seed(e.data)):
            by[e.data["policy"]] = e.data  # the lowest training seed stays
        scale = _normaliser(groups[key])
        cells = []
        for n in names:
            cell = _cell(by[n]) if n in by else "-"
            why = []
            if n in by and by[n]["training"] is not None and scale is not None:
                x = float(normalised(by[n]["mean"], *scale))
                if x <= 0.5:
                    shown = f"{x:.2f}" if f"{x:.2f}" != "0.50" else f"{x:.3f}"  # 0.499
                    why.append(f"below half the random-to-heuristic gap (normalised {shown})")
            if n in by and by[n].get("note"):
                why.append(by[n]["note"])
            if why:
                notes.append(f"{len(notes) + 1}. `{key[0]}` {key[1]}, {n}: " + "; ".join(why))
                cell += f" ({len(notes)})"
            cells.append(cell)
        lines.append(f"| `{key[0]}` | {key[1]} | " + " | ".join(cells) + " |")
    if notes:
        lines += ["", *notes]
    reasons = {(e.data["scenario"], e.data["preset"], e.data["policy"]): e.data["note"]
               for e in entries if e.data.get("note")}
    lines += ["", *render_section([e.data for e in entries], newest_versions(list_envs()),
                                  reasons)]
    lines += ["## Entries", "",
              "Normalised: (mean - random's) / (heuristic's - random's). Paired difference: "
              "the return minus random's on the same seed, mean and 95% t-interval.", ""]
    lines += ["| scenario | preset | policy | seed | mean | 95% CI | normalised | paired "
              "difference to random | training | timesteps | train wall | work hash | entry |",
              "|---|---|---|---:|---:|---|---:|---|---|---:|---:|---|---|"]
    for key in keys:
        scale = _normaliser(groups[key])
        rand = next((e.data for e in groups[key] if e.data["policy"] == "random"), None)
        for e in sorted(groups[key], key=lambda e: (_ORDER.get(e.data["policy"], 2),
                                                    e.data["policy"], _train_seed(e.data))):
            d, t = e.data, e.data["training"]
            lo, hi = d["ci95"]
            norm = "-" if scale is None else f"{normalised(d['mean'], *scale):.2f}"
            paired = "-"
            if rand is not None and d["policy"] != "random":
                p = paired_difference(d["returns"], rand["returns"])
                paired = f"{p.mean:+.1f} [{p.lo:+.1f}, {p.hi:+.1f}]"
            lines.append(
                f"| `{key[0]}` | {key[1]} | {d['policy']} | {'-' if not t else _train_seed(d)} | "
                f"{d['mean']:.1f} | [{lo:.1f}, {hi:.1f}] | {norm} | {paired} | "
                f"{t['algorithm'] if t else '-'} | "
                f"{'-' if not t else format(t['timesteps'], ',')} | "
                f"{'-' if not t or t['wall_s'] is None else _duration(t['wall_s'])} | "
                f"`{d['work_hash']}` | "
                f"[{e.path.stem}](../benchmarks/scores/{e.path.name}) |"
            )
    lines += ["", "## Entry format", "",
              f"Every `benchmarks/scores/*.json` follows `{SCHEMA}` (checked by "
              "`deszoo.scores.validate`):", "", "| field | type | meaning |", "|---|---|---|"]
    for f in [*FIELDS, NOTE]:
        lines.append(f"| `{f.name}` | {' or '.join(t.__name__ for t in f.types)} | {f.doc} |")
    lines += ["", "`training` holds at least:", "", "| field | type | meaning |", "|---|---|---|"]
    for f in TRAINING_FIELDS:
        lines.append(f"| `{f.name}` | {' or '.join(t.__name__ for t in f.types)} | {f.doc} |")
    lines.append("")
    return "\n".join(lines)


def write_docs(directory: str | Path = DEFAULT_DIR, out: str | Path = DEFAULT_OUT,
               check: bool = False, plot: bool = True) -> list[str]:
    """Render ``out`` from the entries in ``directory``; return the problems found.

    With ``plot`` the performance profiles are drawn beside it (``img/score_profiles.png``
    next to ``out``; skipped with a warning without matplotlib). With ``check`` nothing is
    written, and an out-of-date ``out`` is a problem (the picture is not compared: its bytes
    depend on the matplotlib version).
    """
    entries, rejected = load(directory)
    problems = [f"{p}: rejected: " + "; ".join(errs) for p, errs in rejected]
    page, out = render(entries), Path(out)
    if check:
        if not out.exists() or out.read_text() != page:
            problems.append(f"{out} is out of date; run `python -m deszoo.scores --docs`")
    elif not rejected:
        out.write_text(page)
        if plot:
            write_profiles([e.data for e in entries], out.parent)
    return problems


def write_profiles(entries: list[dict[str, Any]], docs: str | Path) -> Path | None:
    """Draw the performance profiles of the newest scenario versions' learners into
    ``docs/img/score_profiles.png``; ``None`` (and a warning) without matplotlib."""
    import importlib.util
    import warnings

    from deszoo import list_envs
    from deszoo.aggregates import (
        PROFILE_IMAGE,
        learners_of,
        newest_versions,
        plot_profiles,
        tasks_from,
    )

    if importlib.util.find_spec("matplotlib") is None:
        warnings.warn("no matplotlib: the performance profiles were not drawn "
                      "(pip install matplotlib)", stacklevel=2)
        return None
    tasks = tasks_from(entries, newest_versions(list_envs()))
    path = Path(docs) / PROFILE_IMAGE
    path.parent.mkdir(exist_ok=True)
    return plot_profiles(tasks, learners_of(tasks), path)


def main(argv: list[str] | None = None) -> int:
    """``python -m deszoo.scores --docs [--check] [--marl-eval FILE]``."""
    import argparse

    from deszoo._links import REPOSITORY

    p = argparse.ArgumentParser(prog="python -m deszoo.scores",
                                description="Write docs/scores.md (with the aggregates "
                                "across tasks and the profile plot) from benchmarks/scores/, "
                                "or export the entries for marl-eval.")
    p.add_argument("--docs", action="store_true", help="write the page and the plot")
    p.add_argument("--check", action="store_true", help="only check that it is up to date")
    p.add_argument("--marl-eval", type=Path, default=None, metavar="FILE",
                   help="write the entries of --dir as marl-eval's raw-data JSON to FILE")
    p.add_argument("--curves", action="store_true",
                   help="with --marl-eval: the learning curves as the steps (marl-eval needs "
                   "equal step counts across runs; the default, one step per run, has them)")
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if not args.docs and args.marl_eval is None:
        p.error("nothing to do: pass --docs or --marl-eval FILE")
    if not args.dir.is_dir() or (args.docs and not args.out.parent.is_dir()):
        missing = args.dir if not args.dir.is_dir() else args.out.parent
        p.error(f"no folder {str(missing)!r} here: --docs runs at the top of a checkout of the "
                f"repository ({REPOSITORY}), where it writes {args.out} from {args.dir} "
                "(--marl-eval reads --dir DIR, a folder of entries)")
    problems: list[str] = []
    if args.marl_eval is not None:
        from deszoo.aggregates import marl_eval_json

        entries, rejected = load(args.dir)
        problems += [f"{p}: rejected: " + "; ".join(errs) for p, errs in rejected]
        data = marl_eval_json([e.data for e in entries], curves=args.curves)
        args.marl_eval.write_text(json.dumps(data, indent=1) + "\n")
    if args.docs:
        problems += write_docs(args.dir, args.out, check=args.check)
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
