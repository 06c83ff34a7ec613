"""Scores across held-out seeds, training seeds and tasks, computed from the score entries.

A *task* is one scenario at one preset. Every entry of a task holds one episode return per
held-out seed (:data:`deszoo.scores.SEEDS`), the same seeds for every policy, so two policies
compare seed by seed (common random numbers): :func:`paired_difference` is the mean of the
per-seed differences with its t-interval, far narrower than two independent intervals when
the seed (the arrivals, the demand) moves both returns together.

Across tasks, a learner's mean return is put on one scale by :func:`normalised` (0 = the
random masked policy, 1 = the scenario's heuristic) and summarised by the interquartile mean
of its (training run, task) scores (:func:`iqm`) with a stratified bootstrap interval
(:func:`bootstrap`), and drawn as a performance profile (:func:`performance_profile`,
:func:`plot_profiles`), as rliable (Agarwal et al., 2021) and marl-eval (Gorsane et al.,
2022) report them. :func:`marl_eval_json` writes the entries in marl-eval's raw-data layout.

The bootstrap resamples, within each task, the training runs with replacement (rliable's
stratified bootstrap) and, within each resampled run, its held-out episodes, the same
episodes for the random and heuristic baselines that normalise it. With one training run
per task the interval holds only the evaluation noise, not the spread between training
seeds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BASELINES",
    "PRESETS",
    "PROFILE_IMAGE",
    "REPS",
    "Paired",
    "Task",
    "bootstrap",
    "iqm",
    "learners_of",
    "marl_eval_json",
    "newest_versions",
    "normalised",
    "paired_difference",
    "performance_profile",
    "plot_profiles",
    "render_section",
    "tasks_from",
    "verdict",
]

BASELINES = ("random", "heuristic")
"""The policies that define the normalised scale (0 and 1); every other entry is a learner."""

PRESETS = ("small", "default")
"""The presets whose tasks the aggregates cover."""

REPS = 2000
"""Bootstrap resamples."""


@dataclass(frozen=True)
class Paired:
    """Mean of per-seed differences ``a - b`` and its two-sided t-interval."""

    mean: float
    lo: float
    hi: float

    @property
    def above_zero(self) -> bool:
        """The interval lies above zero: ``a`` better than ``b`` with confidence."""
        return self.lo > 0.0


def paired_difference(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Paired:
    """The per-seed differences ``a[i] - b[i]`` (the same seed ``i`` for both): mean and
    t-interval at ``level``."""
    from deszoo.scores import t_interval

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired returns need one value per seed on both sides, got "
                         f"{a.shape} and {b.shape}")
    d = a - b
    lo, hi = t_interval(d, level)
    return Paired(float(d.mean()), lo, hi)


def normalised(x: Any, random: float, heuristic: float) -> Any:
    """``(x - random) / (heuristic - random)``: 0 at random, 1 at the heuristic."""
    if not heuristic > random:
        raise ValueError(f"the heuristic ({heuristic}) must score above random ({random}) "
                         "to normalise by their gap")
    return (np.asarray(x, dtype=float) - random) / (heuristic - random)


def iqm(scores: Any, axis: int | None = None) -> Any:
    """Interquartile mean: the mean of the middle 50% of ``scores`` (flattened, or along
    ``axis``), cutting ``int(0.25 * n)`` values at each end as ``scipy.stats.trim_mean``."""
    x = np.asarray(scores, dtype=float)
    if axis is None:
        x, axis = x.reshape(-1), 0
    x = np.sort(x, axis=axis)
    n = x.shape[axis]
    if n == 0:
        raise ValueError("the interquartile mean of no scores")
    cut = int(0.25 * n)
    return np.take(x, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def newest_versions(names: Iterable[str]) -> list[str]:
    """The newest version of each scenario in ``names`` (``traffic_v1`` over ``traffic_v0``)."""
    best: dict[str, tuple[int, str]] = {}
    for name in names:
        m = re.fullmatch(r"(.+)_v(\d+)", name)
        base, version = (m.group(1), int(m.group(2))) if m else (name, -1)
        if base not in best or version > best[base][0]:
            best[base] = (version, name)
    return sorted(name for _, name in best.values())


@dataclass
class Task:
    """One scenario at one preset: its baselines' and learners' returns, one column per
    held-out seed (the same seeds in every array)."""

    scenario: str
    preset: str
    random: np.ndarray
    heuristic: np.ndarray
    runs: dict[str, np.ndarray] = field(default_factory=dict)
    """learner -> returns, shape (training runs, seeds)."""
    train_seeds: dict[str, list[int]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.scenario}/{self.preset}"

    def scores(self, learner: str) -> np.ndarray:
        """The learner's normalised score per training run."""
        return normalised(self.runs[learner].mean(axis=1), float(self.random.mean()),
                          float(self.heuristic.mean()))


def tasks_from(entries: Iterable[dict[str, Any]], scenarios: Iterable[str] | None = None,
               presets: Sequence[str] = PRESETS) -> list[Task]:
    """The tasks of ``entries`` (entry dicts, as :func:`deszoo.scores.load` gives) on
    ``scenarios`` (default: every scenario with entries) at ``presets``; a task needs its
    random and heuristic entries, and gets one run per learner entry (one per training seed)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in entries:
        groups.setdefault((e["scenario"], e["preset"]), []).append(e)
    wanted = None if scenarios is None else set(scenarios)
    tasks = []
    for (scenario, preset), group in sorted(groups.items()):
        if preset not in presets or (wanted is not None and scenario not in wanted):
            continue
        by = {e["policy"]: e for e in group if e["policy"] in BASELINES}
        if set(by) != set(BASELINES):
            continue
        seeds = by["random"]["seeds"]
        task = Task(scenario, preset, np.asarray(by["random"]["returns"], dtype=float),
                    np.asarray(by["heuristic"]["returns"], dtype=float))
        rows: dict[str, list[tuple[int, list[float]]]] = {}
        for e in group:
            if e["seeds"] != seeds:
                raise ValueError(f"{scenario}/{preset}: {e['policy']} was scored on other seeds "
                                 "than random; paired scores need the same seeds")
            if e["policy"] in BASELINES:
                continue
            train_seed = int((e.get("training") or {}).get("train_seed", 0))
            rows.setdefault(e["policy"], []).append((train_seed, e["returns"]))
        for learner, runs in rows.items():
            runs.sort(key=lambda r: r[0])
            task.runs[learner] = np.asarray([r for _, r in runs], dtype=float)
            task.train_seeds[learner] = [s for s, _ in runs]
        tasks.append(task)
    return tasks


def _resampled(tasks: Sequence[Task], learner: str, reps: int, rng: np.random.Generator,
               episodes: bool = True) -> list[np.ndarray]:
    """Per task, ``reps`` bootstrap draws of the learner's normalised run scores, shape
    (reps, runs): runs resampled with replacement, and (with ``episodes``) each drawn run's
    episodes resampled with the same episode draw for the baselines (common random
    numbers)."""
    out = []
    for t in tasks:
        runs = t.runs[learner]
        k, n = runs.shape
        pick = rng.integers(0, k, size=(reps, k))
        if not episodes:
            out.append(t.scores(learner)[pick])
            continue
        eps = rng.integers(0, n, size=(reps, k, n))
        learner_mean = np.take_along_axis(runs[pick], eps, axis=2).mean(axis=2)
        rand, heur = t.random[eps].mean(axis=2), t.heuristic[eps].mean(axis=2)
        gap = heur - rand
        # a resample where the baselines tie has no scale; it drops out of the statistic
        gap = np.where(gap > 0, gap, np.nan)
        out.append((learner_mean - rand) / gap)
    return out


def bootstrap(tasks: Sequence[Task], learner: str,
              statistic: Callable[[np.ndarray], Any] = iqm, reps: int = REPS,
              level: float = 0.95, seed: int = 0, episodes: bool = True) -> tuple[Any, Any, Any]:
    """``statistic`` of the learner's normalised scores over all (run, task) pairs of
    ``tasks``, with the percentile interval at ``level`` of the stratified bootstrap (see
    the module docstring; ``episodes=False``: runs only, as rliable). ``statistic`` maps a
    flat array of scores to a number or array; returns ``(point, low, high)``."""
    tasks = [t for t in tasks if learner in t.runs]
    if not tasks:
        raise ValueError(f"no task has runs of {learner!r}")
    point = statistic(np.concatenate([t.scores(learner) for t in tasks]))
    draws = np.concatenate(_resampled(tasks, learner, reps, np.random.default_rng(seed),
                                      episodes), axis=1)
    values = np.asarray([statistic(row[~np.isnan(row)]) for row in draws])
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(values, [alpha, 1.0 - alpha], axis=0)
    return point, lo, hi


def performance_profile(taus: Sequence[float]) -> Callable[[np.ndarray], np.ndarray]:
    """A statistic for :func:`bootstrap`: the fraction of scores above each ``tau`` (the
    run-score distribution of rliable's performance profiles)."""
    taus = np.asarray(taus, dtype=float)

    def fraction_above(scores: np.ndarray) -> np.ndarray:
        return (np.asarray(scores)[:, None] > taus[None, :]).mean(axis=0)

    return fraction_above


def plot_profiles(tasks: Sequence[Task], learners: Sequence[str], path: str | Path,
                  taus: Sequence[float] | None = None, reps: int = REPS) -> Path:
    """Draw the performance profile of each learner over ``tasks`` (with its 95% bootstrap
    band) into the PNG ``path``. Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    taus = np.linspace(-0.5, 1.5, 81) if taus is None else np.asarray(taus, dtype=float)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for i, learner in enumerate(learners):
        have = [t for t in tasks if learner in t.runs]
        if not have:
            continue
        point, lo, hi = bootstrap(have, learner, performance_profile(taus), reps=reps)
        runs = sum(len(t.runs[learner]) for t in have)
        ax.plot(taus, point, color=f"C{i}",
                label=f"{learner} ({len(have)} tasks, {runs} runs)")
        ax.fill_between(taus, lo, hi, color=f"C{i}", alpha=0.15, lw=0)
    for x, label in ((0.0, "random"), (0.5, "half the gap"), (1.0, "heuristic")):
        ax.axvline(x, color="grey", ls=":" if x != 0.5 else "--", lw=0.8)
        ax.text(x, 1.02, label, ha="center", va="bottom", fontsize=8, color="grey",
                transform=ax.get_xaxis_transform())
    ax.set_xlim(taus[0], taus[-1])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("normalised score τ (0 = random, 1 = heuristic)")
    ax.set_ylabel("fraction of (run, task) scores > τ")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def marl_eval_json(entries: Iterable[dict[str, Any]], environment: str = "deszoo",
                   metric: str = "return", curves: bool = False) -> dict[str, Any]:
    """The entries in marl-eval's raw-data layout: ``{environment: {task: {algorithm:
    {"seed_S": {"step_0": {"step_count": ..., metric: [...]}, ..., "absolute_metrics":
    {metric: [...]}}}}}}``.

    A task is ``SCENARIO-PRESET``; an algorithm a policy name; a run a training seed.
    ``absolute_metrics`` holds the final policy's return on each held-out seed (marl-eval's
    protocol takes 10 times the evaluation episodes of the best policy there; deszoo scores
    the final policy on the 20 held-out seeds). marl-eval needs the same number of steps in
    every run of an environment, so by default each run has one step, ``step_0``, at its
    training timesteps (0 for the baselines) with the same returns: its performance
    profiles and aggregates read them. With ``curves`` the steps are the entry's learning
    curve instead (the mean held-out return at each point, one value; points where an
    episode ran past the curve's cap left out); the number of points differs between
    scenarios, so marl-eval takes such a file one task set of equal curves at a time.
    marl-eval also needs the same runs for every algorithm and task: the baselines have one
    (``seed_0``), the learners as many as their training seeds, so pass it the algorithms
    and tasks that match (e.g. the newest versions' MaskablePPO and MAPPO-loop, 3 each).
    """
    out: dict[str, Any] = {environment: {}}
    for e in sorted(entries, key=lambda e: (e["scenario"], e["preset"], e["policy"])):
        training = e.get("training") or {}
        task = out[environment].setdefault(f"{e['scenario']}-{e['preset']}", {})
        runs = task.setdefault(e["policy"], {})
        returns = [float(r) for r in e["returns"]]
        run: dict[str, Any] = {}
        if curves and e.get("training") is not None:
            points = [(x, y) for x, y in training.get("curve", []) if y is not None]
            for i, (x, y) in enumerate(points):
                run[f"step_{i}"] = {"step_count": int(x), metric: [float(y)]}
        else:
            run["step_0"] = {"step_count": int(training.get("timesteps", 0)), metric: returns}
        run["absolute_metrics"] = {metric: returns}
        runs[f"seed_{int(training.get('train_seed', 0))}"] = run
    return out


# ---- the page ---------------------------------------------------------------------------
PROFILE_IMAGE = "img/score_profiles.png"
"""The performance-profile plot, relative to docs/."""


def learners_of(tasks: Sequence[Task]) -> list[str]:
    """Every learner with runs on ``tasks``, most tasks first."""
    count: dict[str, int] = {}
    for t in tasks:
        for learner in t.runs:
            count[learner] = count.get(learner, 0) + 1
    return sorted(count, key=lambda n: (-count[n], n))


def verdict(task: Task, learner: str) -> tuple[float, Paired, str]:
    """The learner's mean normalised score over its runs on ``task``, its paired difference
    to random (per seed, the runs' mean return), and one line: past half the gap and
    better than random with confidence, or what it misses."""
    score = float(task.scores(learner).mean())
    paired = paired_difference(task.runs[learner].mean(axis=0), task.random)
    misses = []
    if score <= 0.5:
        misses.append("below half the random-to-heuristic gap")
    if not paired.above_zero:
        misses.append("not better than random with 95% confidence")
    return score, paired, ("**" + "; ".join(misses) + "**") if misses else "passes"


def render_section(entries: Iterable[dict[str, Any]], scenarios: Iterable[str],
                   notes: dict[tuple[str, str, str], str] | None = None,
                   page: bool = True) -> list[str]:
    """The page's "Across tasks" section (Markdown lines) over the newest ``scenarios`` at
    :data:`PRESETS`: per task and learner the normalised score and the paired difference to
    random, then each learner's interquartile mean and mean with bootstrap intervals.
    ``notes`` maps (scenario, preset, learner) to a note on its runs (why it fails, or what
    it learned), shown beside its verdict. ``page``: with the profile plot and the export
    (the docs page)."""
    from deszoo.scores import SEEDS

    tasks = tasks_from(entries, scenarios)
    learners = learners_of(tasks)
    notes = notes or {}
    lines = [
        "## Across tasks",
        "",
        f"The newest version of each scenario at the {' and '.join(PRESETS)} presets "
        f"({len(tasks)} tasks). **Normalised score**: (mean return - random's) / "
        "(heuristic's - random's), so 0 is the random masked policy and 1 the heuristic. "
        "**Paired difference**: the learner's return minus random's on the same held-out "
        f"seed, its mean and 95% t-interval over the {len(SEEDS)} seeds (common random "
        "numbers: the seed fixes the arrivals, demand or traffic for both). A learner "
        "*passes* when it is past half the gap (score above 0.5) and its paired "
        "difference's interval lies above zero. With several training runs (seeds), the "
        "score is their mean and the difference uses their mean return per held-out seed.",
        "",
        "| task | learner | runs | normalised score | paired difference to random | verdict |",
        "|---|---|---:|---:|---|---|",
    ]
    for t in tasks:
        for learner in learners:
            if learner not in t.runs:
                continue
            score, p, line = verdict(t, learner)
            runs = t.scores(learner)
            spread = f" ({runs.min():.2f} to {runs.max():.2f})" if len(runs) > 1 else ""
            note = notes.get((t.scenario, t.preset, learner))
            if note:
                line += f": {note}"
            lines.append(f"| `{t.scenario}` {t.preset} | {learner} | {len(runs)} | "
                         f"{score:.2f}{spread} | {p.mean:+.1f} [{p.lo:+.1f}, {p.hi:+.1f}] | "
                         f"{line} |")
    lines += [
        "",
        "Per learner, over the tasks it has runs on: the interquartile mean (IQM, the mean of "
        "the middle 50% of its (run, task) normalised scores) and the mean, each with a 95% "
        f"stratified bootstrap interval ({REPS} resamples: within each task, runs resampled "
        "with replacement and, within each run, its held-out episodes, the same episodes "
        "for the baselines). With one training run per task the interval holds only the "
        "evaluation noise, not the spread between training seeds. Learners on different "
        "task sets do not compare.",
        "",
        "| learner | tasks | runs | IQM [95% CI] | mean [95% CI] | tasks passed |",
        "|---|---:|---:|---|---|---:|",
    ]
    for learner in learners:
        have = [t for t in tasks if learner in t.runs]
        point, lo, hi = bootstrap(have, learner, iqm)
        mpoint, mlo, mhi = bootstrap(have, learner, np.mean)
        passed = sum(verdict(t, learner)[2] == "passes" for t in have)
        runs = sum(len(t.runs[learner]) for t in have)
        lines.append(f"| {learner} | {len(have)} | {runs} | {point:.2f} [{lo:.2f}, {hi:.2f}] | "
                     f"{mpoint:.2f} [{mlo:.2f}, {mhi:.2f}] | {passed} of {len(have)} |")
    lines.append("")
    if not page:
        return lines
    lines += [
        "Performance profiles: the fraction of a learner's (run, task) normalised scores "
        "above each threshold, with its 95% bootstrap band.",
        "",
        f"![performance profiles]({PROFILE_IMAGE})",
        "",
        "`python -m deszoo.scores --marl-eval FILE` writes the entries in marl-eval's raw "
        "JSON layout (environment `deszoo`, task `SCENARIO-PRESET`, one run per training "
        "seed, the held-out returns as `absolute_metrics.return` and in one step at the "
        "training timesteps; `--curves`: the learning curves as the steps), which "
        "marl-eval's `data_process_pipeline` and `create_matrices_for_rliable` read (checked "
        "with id-marl-eval 0.0.4 on the newest versions' MaskablePPO and MAPPO-loop runs).",
        "",
    ]
    return lines
