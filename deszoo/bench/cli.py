"""``deszoo bench`` and ``deszoo leaderboard``: argument parsing, checks, progress, output.

Every argument is checked before any work starts (:func:`check_bench`,
:func:`check_leaderboard`); a bad one is a :class:`~deszoo.errors.ConfigError`, which
``deszoo.cli`` prints as one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deszoo import _cliargs as cliargs
from deszoo._links import doc, repo
from deszoo.core.config import check_first_seed
from deszoo.errors import ConfigError

if TYPE_CHECKING:
    from deszoo.bench.runner import Config, Matrix
    from deszoo.bench.train import TrainRow, TrainSettings  # noqa: F401 (TrainPlan)

__all__ = [
    "DEFAULT_PLOT",
    "BenchPlan",
    "add_commands",
    "check_bench",
    "check_leaderboard",
    "run_bench",
    "run_leaderboard",
]

log = logging.getLogger("deszoo.bench")

DEFAULT_PLOT = Path("deszoo-bench.png")
"""Where ``--plot`` without a file name writes."""

BENCH_EPILOG_HEAD = f"""\
The quick suite (the default) runs jobshop_v0/default (8192 env steps per row) and
traffic_v1/large (512): under a minute on 2 cores, even busy ones (47 to 50 s on
2 shared AMD EPYC cores at load average 5.5 to 7.5). --presets, --steps and --seed
change its works; --scenarios replaces them.

seeds:
  --seed S is {cliargs.SEED_HELP} (default 0). Env i is reset
  with S + i; the policy's random priorities come from numpy's SeedSequence(S).
  Another seed is other work (another work hash): the leaderboard takes seed 0.

flags in the table: B fewer free cores than the row's workers, S spread of the
repeats above 25%, P worker processes differ from workers, X rewards differ
from serial's. Every column is explained in
{doc("benchmarks.md")}.

scenarios and their presets (--scenarios NAME or NAME/PRESET, --presets):
"""


QUICK_SCENARIO_STEPS = 2048
"""``--quick --scenarios ...``: env steps per row (unless ``--steps`` says)."""

QUICK_SCENARIO_REPEATS = 2
"""``--quick --scenarios ...``: timed repeats per row (unless ``--repeats`` says)."""


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` and ``leaderboard`` subcommands to ``deszoo``'s parser."""
    b = sub.add_parser(
        "bench",
        help="measure sampling speed: serial vs round-robin vs multiprocess backends",
        description="Measure how fast scenarios sample in every mode and print a table\n"
        "(compact; --wide for every column). Without options it runs the quick suite.\n"
        f"The method and every figure: {doc('benchmarks.md')}",
        epilog=lambda: BENCH_EPILOG_HEAD + cliargs.presets_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    suite = b.add_mutually_exclusive_group()
    suite.add_argument("--quick", action="store_true",
                       help="the quick suite (the default without --scenarios): a light and "
                       "a heavy scenario, 8 envs, 1 and all cores, every mode but ray; with "
                       f"--scenarios, those at {QUICK_SCENARIO_STEPS} env steps and "
                       f"{QUICK_SCENARIO_REPEATS} repeats per row")
    suite.add_argument("--standard", action="store_true",
                       help="the leaderboard's suite (every scenario; about 20 min on 2 "
                       "cores)")
    suite.add_argument("--autotune", metavar="ENV", type=cliargs.env_name,
                       help="sweep workers x envs per worker for ENV; recommend the fastest "
                       "(with --train: for a training loop)")
    b.add_argument("--train", action="store_true",
                   help="timesteps/s inside PPO training (SB3 through to_sb3, the "
                   "SuperSuit chain, deszoo's PPO loop sync, in halves and pipelined) with the "
                   "share of env steps, inference and updates; default jobshop_v0, "
                   "8 envs, roundrobin and shm; needs torch and 'deszoo[sb3]'. With "
                   "--autotune ENV: deszoo's PPO loop (or --learners) on roundrobin and "
                   "shm, 1, all but one and all cores' workers, shm spinning and not; "
                   "recommends the fastest")
    b.add_argument("--scenarios", type=cliargs.names, metavar="A,B",
                   help="scenarios, 'all', or NAME/PRESET entries, where NAME may be your "
                   "own env as MODULE:ATTR (a class or factory importable from the current "
                   "folder, as deszoo check takes it); default: the suite's")
    b.add_argument("--presets", type=cliargs.names, metavar="P,Q",
                   help="presets of the suite's or --scenarios' plain names")
    b.add_argument("--modes", type=cliargs.names, metavar="M,N",
                   help="modes; default every available one (quick and autotune leave out "
                   "ray); --list-modes prints them")
    b.add_argument("--num-envs", type=cliargs.positive_ints, metavar="N,M",
                   help="envs per row, e.g. 4,8,16")
    b.add_argument("--workers", type=cliargs.positive_ints, metavar="W,V",
                   help="worker counts for multiprocess modes")
    b.add_argument("--learners", type=cliargs.names, metavar="L,M",
                   help="with --train: learners (default all: supersuit-chain, sb3, "
                   "ppo-loop, ppo-loop-halves, ppo-loop-pipelined)")
    b.add_argument("--envs-per-worker", type=cliargs.positive_ints, metavar="E,F",
                   help="with --autotune: envs per worker to try (default 1,2,4,8,16)")
    b.add_argument("--steps", type=cliargs.positive_int, metavar="N",
                   help="env steps per row (the work); with --train, timesteps per run")
    b.add_argument("--repeats", type=cliargs.positive_int, metavar="R",
                   help="timed repeats per row (default 3)")
    b.add_argument("--warmup", type=_fraction, metavar="F",
                   help="untimed warm-up as a fraction of a row's steps, in [0, 1] "
                   "(default 0.1)")
    b.add_argument("--seed", type=cliargs.seed, metavar="S",
                   help=f"env and policy seed, {cliargs.SEED_HELP} (default 0; see below)")
    b.add_argument("--no-interleave", action="store_true",
                   help="run rows one after another instead of alternating their repeats")
    b.add_argument("--out", type=Path, metavar="FILE.json", help="write the result here")
    b.add_argument("--force", action="store_true", help="replace an existing --out file")
    b.add_argument("--plot", type=Path, nargs="?", const=DEFAULT_PLOT, metavar="FILE.png",
                   help=f"write the scaling plot, with error bars (default file: "
                   f"{DEFAULT_PLOT}; needs matplotlib)")
    b.add_argument("--label", help="a name for this machine, stored in the result")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.add_argument("--wide", action="store_true",
                   help="every column (agent-steps/s, sim-time/s, events/s, efficiency, "
                   "memory, ...), not the compact table")
    b.add_argument("--markdown", action="store_true",
                   help="print the table (every column) as GitHub Markdown")
    b.add_argument("--list-modes", action="store_true", help="print the available modes")
    b.set_defaults(cmd_parser=b, cmd_check=check_bench, cmd_run=run_bench)

    lb = sub.add_parser(
        "leaderboard",
        help="validate bench result files (*.json) and write a ranked Markdown page",
        description="Validate every result file in the leaderboard folder against the\n"
        "schema and the standard work, rank configurations per scenario and write the\n"
        "Markdown page. An entry is what `deszoo bench --standard --out NAME.json` writes.\n"
        f"Published entries: {repo('benchmarks/leaderboard')}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    lb.add_argument("--dir", type=Path, default=Path("."),
                    help="the folder of result files (default: the current folder)")
    lb.add_argument("--out", type=Path, default=Path("leaderboard.md"),
                    help="the page to write (default: leaderboard.md in the current folder)")
    lb.add_argument("--check", action="store_true",
                    help="write nothing; fail if the page is out of date or a file is rejected")
    lb.add_argument("--skip-invalid", action="store_true",
                    help="leave rejected files out instead of failing")
    lb.set_defaults(cmd_parser=lb, cmd_check=check_leaderboard, cmd_run=run_leaderboard)


# ---- checks ----------------------------------------------------------------------------
@dataclass
class BenchPlan:
    """What ``deszoo bench`` will run, once its arguments have passed every check."""

    matrix: Matrix | None
    configs: list[Config] | None  # autotune's rows, or None for matrix.configs()
    train: TrainPlan | None = None  # --train's rows and settings instead of a matrix


@dataclass
class TrainPlan:
    """What ``deszoo bench --train`` will run."""

    rows: list[TrainRow]
    settings: TrainSettings


def _check_plot(path: Path) -> None:
    cliargs.check_output_path(path, "--plot")
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        raise ConfigError("argument --plot: needs matplotlib: pip install 'deszoo[bench]' "
                          "(or matplotlib)") from None
    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = path.suffix.lstrip(".").lower()
    if suffix not in formats:
        raise ConfigError(f"argument --plot: cannot write {str(path)!r}: the file name must "
                          f"end in one of {', '.join('.' + f for f in sorted(formats))}")


def _check_entries(entries: list[str], presets: list[str] | None) -> None:
    """Every ``--scenarios`` entry names a registered scenario or a user's env
    (``MODULE:ATTR``), and a preset of it; every ``--presets`` preset exists for every plain
    name it applies to."""
    for entry in entries:
        name, _, preset = entry.partition("/")
        try:
            cliargs.check_env(name)
        except ConfigError as exc:
            raise ConfigError(f"argument --scenarios: {exc}") from None
        for p in [preset] if preset else presets or ["default"]:
            cliargs.check_preset(name, p, "--scenarios" if preset else "--presets")
            if ":" in name:  # built once: a broken env, or one the policy cannot drive
                from deszoo.bench.modes import user_action_type

                kind = user_action_type(name, p)
                if kind.__name__ != "Discrete":
                    raise ConfigError(f"argument --scenarios: {name} has {kind.__name__} "
                                      "actions; the benchmark's policy (one legal action per "
                                      "row, from the mask) needs Discrete ones")


def _apply_settings(matrix, args: argparse.Namespace) -> None:
    for attr, value in (("repeats", args.repeats), ("warmup_fraction", args.warmup),
                        ("seed", args.seed)):
        if value is not None:
            setattr(matrix, attr, value)
    matrix.interleave = not args.no_interleave


def _check_modes(matrix, args: argparse.Namespace) -> None:
    from deszoo.bench.modes import is_in_process

    try:
        modes = matrix.resolved_modes()
    except ConfigError as exc:
        raise ConfigError(f"argument --modes: {exc}") from None
    if args.workers and all(is_in_process(m) for m in modes):
        raise ConfigError(f"argument --workers: none of the modes {modes} has workers")


def _autotune_plan(args: argparse.Namespace) -> BenchPlan:
    from deszoo.bench.autotune import (
        ENVS_PER_WORKER,
        autotune_configs,
        autotune_matrix,
        calibrate_steps,
    )

    if args.scenarios or args.num_envs:
        raise ConfigError("--autotune sweeps its own scenario and num_envs; use "
                          "--workers, --envs-per-worker, --modes and --presets")
    if args.presets and len(args.presets) > 1:
        raise ConfigError(f"argument --presets: --autotune takes one preset, got "
                          f"{','.join(args.presets)}")
    preset = (args.presets or ["default"])[0]
    cliargs.check_preset(args.autotune, preset, "--presets")
    matrix = autotune_matrix(args.autotune, preset=preset, env_steps=args.steps or 1)
    _apply_settings(matrix, args)
    if args.modes:
        matrix.modes = args.modes
        _check_modes(matrix, args)
    if args.steps is None:  # work, so after every check
        matrix.env_steps = calibrate_steps(args.autotune, preset)
    configs = autotune_configs(matrix, modes=args.modes, workers=args.workers,
                               envs_per_worker=args.envs_per_worker or ENVS_PER_WORKER)
    return BenchPlan(matrix, configs)


def _matrix_plan(args: argparse.Namespace) -> BenchPlan:
    from deszoo.bench.runner import available_scenarios, quick_matrix, standard_matrix
    from deszoo.bench.work import Work

    matrix = standard_matrix() if args.standard else quick_matrix(modes=args.modes)
    if args.scenarios:
        entries = available_scenarios() if args.scenarios == ["all"] else args.scenarios
        if args.presets and all("/" in e for e in entries):
            raise ConfigError("argument --presets: every --scenarios entry names its own "
                              "preset (NAME/PRESET), so --presets would change nothing")
        _check_entries(entries, args.presets)
        matrix.scenarios, matrix.work_list = entries, None
        matrix.suite = "custom"  # not the suite's work, whatever its settings
        if args.presets:
            matrix.presets = args.presets
        if args.quick:  # your own scenarios, quickly: a first look in seconds
            matrix.env_steps = QUICK_SCENARIO_STEPS
            matrix.repeats = QUICK_SCENARIO_REPEATS
        if args.steps is not None:
            matrix.env_steps = args.steps
    elif matrix.work_list is not None:  # the quick suite: its works, changed by the options
        if args.presets:
            _check_entries([w.scenario for w in matrix.work_list], args.presets)
        matrix.work_list = [
            Work(w.scenario, p, args.steps or w.env_steps,
                 w.seed if args.seed is None else args.seed)
            for w in matrix.work_list for p in (args.presets or [w.preset])
        ]
        matrix.scenarios = [w.label for w in matrix.work_list]
    else:  # the standard suite
        _check_entries(matrix.scenarios, args.presets)
        if args.presets:
            matrix.presets = args.presets
        if args.steps is not None:
            matrix.env_steps = args.steps
    if not matrix.scenarios:
        raise ConfigError("no scenario to run: none of the registered scenarios imports")
    if args.num_envs:
        matrix.num_envs = args.num_envs
    if args.workers:
        matrix.num_workers = args.workers
    if args.modes:
        matrix.modes = args.modes
    _apply_settings(matrix, args)
    matrix.__post_init__()
    _check_modes(matrix, args)
    if args.standard and (args.steps is not None or args.seed is not None):
        log.warning("--steps/--seed change the work: the leaderboard will reject this result")
    return BenchPlan(matrix, None)


_NOT_WITH_TRAIN = (("plot", "--plot"), ("envs_per_worker", "--envs-per-worker"),
                   ("warmup", "--warmup"), ("no_interleave", "--no-interleave"),
                   ("wide", "--wide"))


def _train_plan(args: argparse.Namespace) -> BenchPlan:
    from deszoo.bench.modes import missing_package, vector_backends
    from deszoo.bench.train import (
        DEFAULT_BACKENDS,
        LEARNERS,
        TrainSettings,
        install_hint,
        missing_packages,
        train_rows,
        tune_workers,
    )
    from deszoo.vector import usable_cores

    for attr, flag in _NOT_WITH_TRAIN:
        if getattr(args, attr):
            raise ConfigError(f"argument {flag}: not with --train")
    tune = args.autotune
    if tune and args.scenarios:
        raise ConfigError("argument --scenarios: --train --autotune ENV tunes ENV; give it "
                          "the preset with --presets")
    learners = args.learners or (["ppo-loop"] if tune else list(LEARNERS))
    unknown = [lr for lr in learners if lr not in LEARNERS]
    if unknown:
        raise ConfigError(f"argument --learners: unknown {', '.join(unknown)}; learners are "
                          f"{', '.join(LEARNERS)}")
    if args.seed is not None:  # a usage error whatever is installed
        check_first_seed(args.seed, max(args.num_envs or [8]), "argument --seed")
    missing = missing_packages(learners)
    if missing:
        raise ConfigError(f"--train needs {', '.join(missing)} (learners "
                          f"{', '.join(learners)}): {install_hint(missing)}")
    entries = [tune] if tune else args.scenarios or ["jobshop_v0"]
    if entries == ["all"]:
        raise ConfigError("argument --scenarios: --train takes scenarios by name, not 'all'")
    _check_entries(entries, args.presets)
    scenarios = []
    for e in entries:
        name, _, preset = e.partition("/")
        scenarios += [(name, p) for p in ([preset] if preset else args.presets or ["default"])]
    backends = args.modes or list(DEFAULT_BACKENDS)
    for b in backends:
        if b == "serial" or b not in vector_backends():
            raise ConfigError(f"argument --modes: {b!r} is not a vector backend; --train runs "
                              f"the learners on {', '.join(vector_backends())}")
        if missing_package(b):
            raise ConfigError(f"argument --modes: {b} needs {missing_package(b)}: pip install "
                              "it")
    settings = TrainSettings()
    for attr, value in (("timesteps", args.steps), ("repeats", args.repeats),
                        ("seed", args.seed)):
        if value is not None:
            setattr(settings, attr, value)
    num_sims = args.num_envs or [8]
    workers = args.workers or ([usable_cores()] if not tune else sorted(
        {w for n in num_sims for w in tune_workers(usable_cores(), n)}))
    spins = (None, 0.0) if tune else (None,)
    every = train_rows(scenarios, learners, backends, num_sims, workers, spins)
    rows = [r for r in every if r.num_workers <= r.num_sims]
    if not rows:
        why = (f"every row has more workers than sims (workers {workers}, sims {num_sims})"
               if every else "the loop's halves run on multiprocess backends only, with at "
               "least 2 sims")
        raise ConfigError(f"--train: no row to run ({why})")
    if len(rows) < len(every):
        log.warning("--train: %d row(s) left out: more workers than sims", len(every) - len(rows))
    return BenchPlan(None, None, TrainPlan(rows, settings))


def check_bench(args: argparse.Namespace) -> BenchPlan | None:
    """Check every ``deszoo bench`` argument; the plan to run (None for ``--list-modes``).

    Raises:
        ConfigError: a bad argument, or a combination that would be ignored.
    """
    if args.list_modes:
        given = [f"--{dest.replace('_', '-')}" for dest in (
            "quick", "standard", "autotune", "train", "scenarios", "presets", "modes",
            "num_envs", "workers", "learners", "envs_per_worker", "steps", "repeats", "warmup",
            "seed", "no_interleave", "out", "force", "plot", "label", "wide", "markdown")
            if getattr(args, dest, None) not in (None, False)]
        if given:
            raise ConfigError(f"argument --list-modes: lists the modes and runs nothing; "
                              f"{', '.join(given)} would be ignored")
        return None
    if args.out is not None:
        cliargs.check_output_path(args.out, "--out", force=args.force)
    if args.plot is not None:
        _check_plot(args.plot)
        if args.out is not None and args.plot.resolve() == args.out.resolve():
            raise ConfigError(f"argument --plot: {str(args.plot)!r} is the --out file too")
    if args.train:
        if args.quick or args.standard:
            other = "--quick" if args.quick else "--standard"
            raise ConfigError(f"argument --train: not with {other}")
        return _train_plan(args)
    if args.learners:
        raise ConfigError("argument --learners: only with --train")
    if args.envs_per_worker and not args.autotune:
        raise ConfigError("argument --envs-per-worker: only with --autotune")
    plan = _autotune_plan(args) if args.autotune else _matrix_plan(args)
    _check_seed_fits(plan)
    return plan


def _check_seed_fits(plan: BenchPlan) -> None:
    """Env ``i`` of a row is seeded ``seed + i``: each must be a seed (not a failed row)."""
    matrix = plan.matrix
    envs = max(c.num_envs for c in plan.configs) if plan.configs else max(matrix.num_envs)
    for seed in {w.seed for w in matrix.works()}:
        check_first_seed(seed, envs, "argument --seed")


def check_leaderboard(args: argparse.Namespace) -> None:
    """Check the ``deszoo leaderboard`` folders before reading anything."""
    if not args.dir.is_dir():
        raise ConfigError(f"argument --dir: no folder {str(args.dir)!r}")
    cliargs.check_output_path(args.out, "--out")


# ---- running -----------------------------------------------------------------------------
def _console(stderr: bool = False):
    from rich.console import Console

    class Quiet(Console):
        def on_broken_pipe(self) -> None:
            # rich exits with status 1 here; deszoo's main exits quietly with 141.
            self.quiet = True
            raise BrokenPipeError

    stream = sys.stderr if stderr else sys.stdout
    return Quiet(stderr=stderr, width=None if stream.isatty() else 200)


def _setup_logging(console) -> None:
    from rich.logging import RichHandler

    root = logging.getLogger("deszoo")
    if not any(isinstance(h, RichHandler) for h in root.handlers):
        root.addHandler(RichHandler(console=console, show_time=False, show_path=False))
    root.setLevel(logging.WARNING)


def _progress(console, disable: bool):
    """The progress bar. Its time left is the units still to do over the units done per
    second since the start (rich's default, the last 30 s, swings as the rows of a group
    alternate), shown once 5 % of the units are done (before that it would rest on the
    set-up of a few rows)."""
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class TimeLeft(TimeRemainingColumn):
        def render(self, task):
            if task.total and task.completed < 0.05 * task.total:
                return Text("-:--:--", style="progress.remaining")
            return super().render(task)

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeLeft(),
        console=console,
        transient=True,
        refresh_per_second=2,  # its thread shares the parent's CPU with the timed loop
        speed_estimate_period=24 * 3600,
        disable=disable,
    )


def _print_markdown(console, result: dict) -> None:
    from deszoo.bench.report import (
        COLUMNS,
        caption,
        free_cores,
        legend,
        markdown_table,
        row_cells,
        row_flags,
    )

    free = free_cores(result)
    text = markdown_table(result["rows"], [*COLUMNS, ("flag", "left")],
                          lambda row: [*row_cells(row), row_flags(row, free)])
    console.print(text + "\n\n" + caption(result) + "\n\n" + "\n".join(legend(wide=True)),
                  highlight=False, markup=False, soft_wrap=True)


def run_bench(args: argparse.Namespace, plan: BenchPlan | None) -> int:
    """``deszoo bench``: run the plan, print the table, write ``--out`` and ``--plot``."""
    from deszoo.bench.autotune import recommend
    from deszoo.bench.modes import all_modes, missing_package
    from deszoo.bench.report import (
        conclusion,
        failures,
        load_warnings,
        plot_scaling,
        print_report,
    )
    from deszoo.bench.runner import run_matrix, total_units

    console = _console()
    # With --markdown, stdout is the Markdown alone: progress, warnings and notes on stderr.
    info = _console(stderr=True) if getattr(args, "markdown", False) else console
    _setup_logging(info)
    if plan is None:  # --list-modes
        for mode in all_modes():
            missing = missing_package(mode)
            note = f"  (needs {missing}: pip install it to use this mode)" if missing else ""
            console.print(mode + note, highlight=False, markup=False)
        return 0
    argv = getattr(args, "argv", None)
    command = "deszoo " + shlex.join(sys.argv[1:] if argv is None else argv)
    if plan.train is not None:
        return _run_train(args, plan.train, console, command)
    progress = _progress(info, args.no_progress)
    with progress, cliargs.stall_watch("deszoo bench") as note:
        task = progress.add_task("starting", total=total_units(plan.matrix, plan.configs))

        def tick(advance: float, description: str) -> None:
            note(description)
            progress.update(task, advance=advance, description=description)

        try:
            result = run_matrix(plan.matrix, progress=tick, label=args.label,
                                command=command, configs=plan.configs)
        except KeyboardInterrupt:
            progress.stop()
            print("deszoo: interrupted; no result written", file=sys.stderr)
            return 130
    if args.markdown:
        _print_markdown(console, result)
    else:
        print_report(console, result, wide=args.wide)
    for message in load_warnings(result):  # logged: the log handler prints under the table
        log.warning(message)
    if args.autotune:
        _print_recommendation(console, recommend(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        info.print(f"wrote {args.out}", highlight=False)
    if args.plot:
        plot_scaling(result, args.plot)
        info.print(f"wrote {args.plot}", highlight=False)
    line = conclusion(result)
    if line is not None and not args.autotune:
        info.print(line, highlight=False, markup=False, soft_wrap=True)
    failed = failures(result)
    if failed:
        info.print(f"[red]{len(failed)} row(s) failed:[/red]", highlight=False)
        for line in failed:
            info.print(f"  {line}", highlight=False, markup=False)
        return 1
    return 0


def _run_train(args: argparse.Namespace, plan, console, command: str) -> int:
    """``deszoo bench --train``: run the learners, print the table, write ``--out``."""
    from deszoo.bench import train
    from deszoo.bench.report import markdown_table

    progress = _progress(console, args.no_progress)
    with progress:
        task = progress.add_task("starting", total=len(plan.rows) * plan.settings.repeats)

        def tick(advance: float, description: str) -> None:
            progress.update(task, advance=advance, description=description or None)

        try:
            result = train.run_train(plan.rows, plan.settings, progress=tick)
        except KeyboardInterrupt:
            progress.stop()
            print("deszoo: interrupted; no result written", file=sys.stderr)
            return 130
    result["command"] = command
    result["machine"]["label"] = args.label
    if args.markdown:
        text = markdown_table(result["rows"], train.COLUMNS, train.row_cells)
        console.print(text + "\n\n" + train.caption(result), highlight=False, markup=False,
                      soft_wrap=True)
    else:
        from rich import box
        from rich.table import Table

        table = Table(title="deszoo bench --train", caption=train.caption(result),
                      caption_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                      pad_edge=False, collapse_padding=True)
        for name, justify in train.COLUMNS:
            table.add_column(name, justify=justify, no_wrap=True)
        for row in result["rows"]:
            table.add_row(*train.row_cells(row))
        console.print(table, crop=False)
    for line in train.pipeline_lines(result):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        console.print(f"wrote {args.out}", highlight=False)
    failed = [r for r in result["rows"] if r["error"] is not None]
    for r in failed:
        console.print(f"failed: {r['learner']} on {r['backend']}: {r['error']}",
                      highlight=False, markup=False)
    if args.autotune:
        for line in train.recommendation_lines(train.recommend(result)):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    return 1 if failed else 0


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"


def _describe(row: dict) -> str:
    workers = "" if row["num_workers"] == 0 else f" on {row['num_workers']} workers"
    return (f"{row['mode']} with {row['num_envs']} envs{workers}: "
            f"{row['env_steps_per_s']:,.0f} env-steps/s")


def _print_recommendation(console, rec: dict | None) -> None:
    if rec is None:
        console.print("no configuration ran; nothing to recommend", highlight=False)
        return
    if rec["vector"] is None:
        console.print(f"fastest: {_describe(rec['fastest'])} (no vector backend ran)",
                      highlight=False)
        return
    console.print(f"fastest vector env: {_describe(rec['vector'])}", highlight=False)
    if rec["compact"] is not rec["vector"]:
        console.print(f"within 5% with fewer envs: {_describe(rec['compact'])}",
                      highlight=False)
    if rec["fastest"] is not rec["vector"]:
        console.print(
            f"note: a plain serial loop is faster here ({_describe(rec['fastest'])}): on "
            "this machine batching costs more per step than parallel workers give back",
            highlight=False)
    console.print(f"recommended: {rec['snippet']}", highlight=False)


def run_leaderboard(args: argparse.Namespace, plan: None = None) -> int:
    """``deszoo leaderboard``: validate, rank, write (or ``--check``) the page."""
    from deszoo.bench.leaderboard import load, render

    out = args.out
    entries, rejected = load(args.dir)
    for r in rejected:
        print(r.message(), file=sys.stderr)
    if rejected and not args.skip_invalid:
        print(f"deszoo: error: {len(rejected)} of {len(entries) + len(rejected)} file(s) "
              f"rejected; {out} not written (--skip-invalid leaves them out)",
              file=sys.stderr)
        return 1
    if not entries:
        print(f"deszoo: error: no {'valid ' if rejected else ''}result files (*.json) in "
              f"{args.dir}; nothing written. An entry is what `deszoo bench --standard "
              f"--out {args.dir / 'NAME.json'}` writes (the standard work, about 20 min "
              f"on 2 cores); --dir names another folder; published entries: "
              f"{repo('benchmarks/leaderboard')}", file=sys.stderr)
        return 1
    text = render(entries, out)
    if args.check:
        current = out.read_text() if out.exists() else ""
        if current != text:
            print(f"deszoo: error: {out} is out of date; run "
                  f"`deszoo leaderboard --dir {args.dir} --out {out}`", file=sys.stderr)
            return 1
        print(f"{out} is up to date ({_entries(len(entries))})")
        return 0
    out.write_text(text)
    print(f"wrote {out}: {_entries(len(entries))}"
          + (f", {len(rejected)} rejected and left out" if rejected else ""))
    return 0
