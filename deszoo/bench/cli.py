"""``deszoo bench`` and ``deszoo leaderboard``: argument parsing, progress bar, output."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from pathlib import Path

from deszoo.errors import ConfigError

__all__ = ["add_commands", "run_bench", "run_leaderboard"]


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` and ``leaderboard`` subcommands to ``deszoo``'s parser."""
    b = sub.add_parser(
        "bench",
        help="measure sampling speed: serial vs round-robin vs multiprocess backends",
        description="Measure how fast scenarios sample in every mode. Without matrix "
        "options it runs the quick matrix (about a minute on 2 cores). See "
        "docs/benchmarks.md.",
    )
    suite = b.add_mutually_exclusive_group()
    suite.add_argument("--quick", action="store_true",
                       help="the quick matrix (the default): one light scenario, 8 envs, "
                       "1 and all cores, every mode but ray")
    suite.add_argument("--standard", action="store_true",
                       help="the leaderboard's standard matrix (every scenario; minutes)")
    suite.add_argument("--autotune", metavar="ENV",
                       help="sweep workers x envs per worker for ENV; recommend the fastest")
    b.add_argument("--scenarios", type=_names, metavar="A,B",
                   help="scenarios (or 'all'); default: the suite's")
    b.add_argument("--presets", type=_names, metavar="P,Q", help="presets (default: default)")
    b.add_argument("--modes", type=_names, metavar="M,N",
                   help="modes; default every available one (quick and autotune leave out ray)")
    b.add_argument("--num-envs", type=_ints, metavar="N,M", help="envs per row, e.g. 4,8,16")
    b.add_argument("--workers", type=_ints, metavar="W,V",
                   help="worker counts for multiprocess modes")
    b.add_argument("--envs-per-worker", type=_ints, metavar="E,F",
                   help="autotune: envs per worker to try (default 1,2,4,8,16)")
    b.add_argument("--steps", type=int, metavar="N", help="env steps per row (the work)")
    b.add_argument("--repeats", type=int, metavar="R", help="timed repeats per row (default 3)")
    b.add_argument("--warmup", type=float, metavar="F",
                   help="untimed warm-up as a fraction of a row's steps (default 0.1)")
    b.add_argument("--seed", type=int, help="env and policy seed (default 0)")
    b.add_argument("--no-interleave", action="store_true",
                   help="run rows one after another instead of alternating their repeats")
    b.add_argument("--out", type=Path, metavar="FILE.json", help="write the result here")
    b.add_argument("--plot", type=Path, metavar="FILE.png", help="write the scaling plot here")
    b.add_argument("--label", help="a name for this machine, stored in the result")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.add_argument("--markdown", action="store_true",
                   help="print the table as GitHub Markdown (for READMEs and issues)")
    b.add_argument("--list-modes", action="store_true", help="print the available modes")

    lb = sub.add_parser(
        "leaderboard",
        help="validate benchmarks/leaderboard/*.json and write docs/leaderboard.md",
        description="Validate every result file in the leaderboard folder against the "
        "schema and the standard work, rank configurations per scenario and write the "
        "Markdown page.",
    )
    lb.add_argument("--dir", type=Path, default=None, help="default benchmarks/leaderboard")
    lb.add_argument("--out", type=Path, default=None, help="default docs/leaderboard.md")
    lb.add_argument("--check", action="store_true",
                    help="write nothing; fail if the page is out of date or a file is rejected")
    lb.add_argument("--skip-invalid", action="store_true",
                    help="leave rejected files out instead of failing")


def _console():
    from rich.console import Console

    return Console(stderr=False, width=None if sys.stdout.isatty() else 200)


def _setup_logging(console) -> None:
    from rich.logging import RichHandler

    root = logging.getLogger("deszoo")
    if not any(isinstance(h, RichHandler) for h in root.handlers):
        root.addHandler(RichHandler(console=console, show_time=False, show_path=False))
    root.setLevel(logging.WARNING)


def _matrix(args: argparse.Namespace):
    """The matrix (and, for autotune, the rows) that the options ask for."""
    from deszoo.bench.autotune import autotune_configs, autotune_matrix, calibrate_steps
    from deszoo.bench.runner import available_scenarios, quick_matrix, standard_matrix
    from deszoo.registry import env_module, list_envs

    if args.autotune:
        env_module(args.autotune)  # ConfigError for an unknown name
        if args.scenarios or args.num_envs:
            raise ConfigError("--autotune sweeps its own scenario and num_envs; use "
                              "--workers, --envs-per-worker, --modes and --presets")
        preset = (args.presets or ["default"])[0]
        steps = args.steps or calibrate_steps(args.autotune, preset)
        matrix = autotune_matrix(args.autotune, preset=preset, env_steps=steps)
    else:
        matrix = standard_matrix() if args.standard else quick_matrix(modes=args.modes)
        if any(v is not None for v in (args.scenarios, args.presets, args.steps, args.seed)):
            matrix.work_list = None  # the quick suite's own works give way to the options
        if args.scenarios:
            matrix.scenarios = (available_scenarios() if args.scenarios == ["all"]
                                else args.scenarios)
        if args.presets:
            matrix.presets = args.presets
        if args.num_envs:
            matrix.num_envs = args.num_envs
        if args.workers:
            matrix.num_workers = args.workers
        if args.steps is not None:
            matrix.env_steps = args.steps
        if args.modes:
            matrix.modes = args.modes
    for attr, value in (("repeats", args.repeats), ("warmup_fraction", args.warmup),
                        ("seed", args.seed)):
        if value is not None:
            setattr(matrix, attr, value)
    matrix.interleave = not args.no_interleave
    matrix.__post_init__()
    if not matrix.scenarios:
        raise ConfigError("no scenario to run: none of the registered scenarios imports")
    unknown = [s for s in matrix.scenarios if s.partition("/")[0] not in list_envs()]
    if unknown:
        raise ConfigError(f"unknown scenario(s) {unknown}; registered: {list_envs()}")
    if args.standard and (args.steps is not None or args.seed is not None):
        logging.getLogger("deszoo.bench").warning(
            "--steps/--seed change the work: the leaderboard will reject this result")
    if args.autotune:
        configs = autotune_configs(matrix, modes=args.modes, workers=args.workers,
                                   envs_per_worker=args.envs_per_worker or (1, 2, 4, 8, 16))
        return matrix, configs
    matrix.resolved_modes()  # fail early on an unknown mode
    return matrix, None


def run_bench(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """``deszoo bench``: run, print the table, write ``--out`` and ``--plot``."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from deszoo.bench.autotune import recommend
    from deszoo.bench.modes import all_modes, missing_package
    from deszoo.bench.report import (
        caption,
        failures,
        markdown_table,
        plot_scaling,
        rich_table,
    )
    from deszoo.bench.runner import run_matrix, total_units

    console = _console()
    _setup_logging(console)
    if args.list_modes:
        for mode in all_modes():
            missing = missing_package(mode)
            note = f"  (needs {missing}: pip install it to use this mode)" if missing else ""
            console.print(mode + note, highlight=False, markup=False)
        return 0
    try:
        matrix, configs = _matrix(args)
    except ConfigError as exc:
        console.print(f"[red]error:[/red] {exc}", highlight=False)
        return 2
    command = "deszoo " + shlex.join(sys.argv[1:] if argv is None else argv)
    total = total_units(matrix, configs)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        refresh_per_second=2,  # its thread shares the parent's CPU with the timed loop
        disable=args.no_progress,
    )
    with progress:
        task = progress.add_task("starting", total=total)

        def tick(advance: int, description: str) -> None:
            progress.update(task, advance=advance, description=description)

        try:
            result = run_matrix(matrix, progress=tick, label=args.label, command=command,
                                configs=configs)
        except KeyboardInterrupt:
            progress.stop()
            console.print("interrupted: no result written", highlight=False)
            return 130
    if args.markdown:
        console.print(markdown_table(result["rows"]) + "\n\n" + caption(result),
                      highlight=False, markup=False, soft_wrap=True)
    else:
        console.print(rich_table(result))
    if args.autotune:
        _print_recommendation(console, recommend(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        console.print(f"wrote {args.out}", highlight=False)
    if args.plot:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        plot_scaling(result, args.plot)
        console.print(f"wrote {args.plot}", highlight=False)
    failed = failures(result)
    if failed:
        console.print(f"[red]{len(failed)} row(s) failed:[/red]", highlight=False)
        for line in failed:
            console.print(f"  {line}", highlight=False, markup=False)
        return 1
    return 0


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


def run_leaderboard(args: argparse.Namespace) -> int:
    """``deszoo leaderboard``: validate, rank, write (or ``--check``) the page."""
    from deszoo.bench.leaderboard import DEFAULT_DIR, DEFAULT_OUT, load, render

    directory = args.dir or DEFAULT_DIR
    out = args.out or DEFAULT_OUT
    if not directory.is_dir():
        print(f"error: no folder {directory} (run from the repository root or pass --dir)",
              file=sys.stderr)
        return 2
    entries, rejected = load(directory)
    for r in rejected:
        print(r.message(), file=sys.stderr)
    if rejected and not args.skip_invalid:
        print(f"error: {len(rejected)} of {len(entries) + len(rejected)} file(s) rejected; "
              f"{out} not written (--skip-invalid leaves them out)", file=sys.stderr)
        return 1
    text = render(entries)
    if args.check:
        current = out.read_text() if out.exists() else ""
        if current != text:
            print(f"error: {out} is out of date; run `deszoo leaderboard`", file=sys.stderr)
            return 1
        print(f"{out} is up to date ({len(entries)} entries)")
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}: {len(entries)} entries"
          + (f", {len(rejected)} rejected and left out" if rejected else ""))
    return 0
