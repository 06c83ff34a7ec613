"""The ``deszoo`` command: ``run``, ``check``, ``list``, ``scores``, ``profile``, ``bench`` and
``leaderboard``.

Every argument is checked before any work starts. Exit status: 0 on success; 1 when the
work failed (a benchmark row, a rejected leaderboard file); 2 for a bad argument, with one
line ``deszoo: error: ...`` on stderr; 130 on Ctrl-C; 141 when stdout was closed early
(``deszoo run ... | head``), which ends the command quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from deszoo import __version__
from deszoo import _cliargs as cliargs
from deszoo._links import doc, repo
from deszoo.errors import ConfigError, InvalidActionError

EPISODE_STEPS = 100_000
"""``deszoo check``'s and ``deszoo run``'s default bound on an episode's steps (the same
figure as :data:`deszoo.checks.EPISODE_STEPS`, kept here so that ``--help`` imports
nothing heavy)."""

EPISODE_SECONDS = 20.0
"""``deszoo check``'s default bound on an episode's wall time
(:data:`deszoo.checks.EPISODE_SECONDS`)."""

__all__ = ["EXIT_INTERRUPTED", "EXIT_PIPE", "build_parser", "main", "run_episode"]

EXIT_INTERRUPTED = 130
"""Exit status after Ctrl-C: 128 + SIGINT, as a shell reports it."""

EXIT_PIPE = 141
"""Exit status when stdout was closed early: 128 + SIGPIPE, as a shell reports it."""

DESCRIPTION = (
    "SimPy discrete-event simulations as PettingZoo environments, sampled in parallel. "
    "'deszoo COMMAND --help' describes each command."
)

RUN_EPILOG_HEAD = f"""\
seeds:
  --seed S is {cliargs.SEED_HELP} (default 0). The episode is reset with
  reset(seed=S), which seeds the simulation's random generator; the random
  policy draws from a generator of its own seeded with S. The same scenario,
  preset, seed and policy replay the same episode.

scenarios and their presets (--preset, default: default):
"""


def run_episode(name: str, seed: int = 0, preset: str | None = None,
                policy: str = "heuristic", max_steps: int | None = EPISODE_STEPS,
                on_step=None) -> dict:
    """Play one episode of ``name`` (a registered scenario or ``MODULE:ATTR``), stopped after
    ``max_steps`` steps if it has not ended (``ended_by`` is then ``"step cap"``); return a
    dict of summary figures. ``on_step(env, rewards, infos)`` is called after the reset and
    after every step."""
    import time

    from deszoo.episodes import play, target

    what = target(name, preset)
    start = time.perf_counter()
    env, figures = play(what, seed, policy, on_step=on_step, max_steps=max_steps)
    wall = time.perf_counter() - start
    env.close()
    steps = figures["steps"]
    return {
        "scenario": name,
        "preset": preset,
        "seed": seed,
        "policy": policy,
        **figures,
        "events_per_step": (figures["sim_events"] or 0) / max(steps, 1),
        "wall_s": wall,
        "steps_per_s": steps / wall if wall > 0 else float("inf"),
    }


_SUMMARY_KEYS = ("scenario", "policy", "env steps", "agent decisions", "simulated time",
                 "SimPy events", "episode ended by", "total return", "wall time")
_WIDTH = max(len(k) for k in _SUMMARY_KEYS)


def _print_rows(rows: list[tuple[str, object]]) -> None:
    for key, value in rows:
        print(f"{key:<{_WIDTH}}  {value}")


STALL_SECONDS = 20.0
"""``deszoo run`` says so on stderr when no step has returned for this long."""


@contextlib.contextmanager
def _stall_notice(seconds: float = STALL_SECONDS):
    """Yield an ``on_step`` callback; while it is not called for ``seconds``, print a notice
    on stderr every ``seconds`` (a step that never returns must not be a silent hang).
    Watches nothing outside the main thread or without ``SIGALRM``."""
    import signal
    import threading
    import time

    seen = {"steps": -1, "env": None, "at": time.monotonic()}

    def on_step(env, rewards, infos):
        seen["steps"] += 1
        seen["env"] = env
        seen["at"] = time.monotonic()

    if not hasattr(signal, "setitimer") or (threading.current_thread()
                                            is not threading.main_thread()):
        yield on_step
        return
    told = {"steps": seen["steps"], "times": 0}  # notices of the call in flight

    def tick(signum, frame):
        if seen["steps"] != told["steps"]:
            told.update(steps=seen["steps"], times=0)
        stuck = time.monotonic() - seen["at"]
        if stuck < seconds * (told["times"] + 1):
            return
        told["times"] += 1
        clock = getattr(seen["env"], "now", None)
        clock = "" if clock is None else f", simulated time {float(clock):.6g}"
        what = "the reset" if seen["steps"] < 0 else f"step {seen['steps'] + 1}"
        print(f"deszoo run: {what} has not returned for {stuck:.2g} s{clock}: a model "
              "whose processes run without reaching a decision point or an end never "
              "returns (deszoo check names the fix); Ctrl-C stops it", file=sys.stderr,
              flush=True)

    old = signal.signal(signal.SIGALRM, tick)
    tick_s = min(1.0, seconds / 4)
    signal.setitimer(signal.ITIMER_REAL, tick_s, tick_s)
    try:
        yield on_step
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _run(args: argparse.Namespace, plan: str) -> int:
    """``deszoo run``: the first lines before the episode (so that a long one shows that it
    started), the figures after it. ``plan`` is the policy."""
    preset = f"preset {args.preset}, " if args.preset is not None else ""
    _print_rows([
        ("scenario", f"{args.name} ({preset}seed {args.seed})"),
        ("policy", plan),
    ])
    sys.stdout.flush()
    with _stall_notice() as on_step:
        s = run_episode(args.name, args.seed, args.preset, plan, args.max_steps, on_step)
    sim_time = "n/a" if s["sim_time"] is None else f"{s['sim_time']:.2f}"
    events = ("n/a" if s["sim_events"] is None
              else f"{s['sim_events']} ({s['events_per_step']:.1f} per step)")
    _print_rows([
        ("env steps", s["steps"]),
        ("agent decisions", s["decisions"]),
        ("simulated time", sim_time),
        ("SimPy events", events),
        ("episode ended by", s["ended_by"]),
        ("total return", f"{s['return_total']:.3f}"),
        ("wall time", f"{s['wall_s'] * 1e3:.1f} ms ({s['steps_per_s']:.0f} env-steps/s)"),
    ])
    print()
    print(f"{'agent':<{_WIDTH}}  return")
    for agent, ret in s["returns"].items():
        print(f"{agent:<{_WIDTH}}  {ret:.3f}")
    if s["ended_by"] == "step cap":
        print(f"\ndeszoo run: stopped after {s['steps']} steps (--max-steps): the episode had "
              f"not ended (simulated time {sim_time}). A model that runs forever needs an "
              "end: give the env a max_time (or max_steps), or end the episode from the "
              "model; deszoo check names the fix. For a longer episode, raise --max-steps.",
              file=sys.stderr)
        return 1
    if args.plot is not None:
        from deszoo.plots import plot_episode

        # The same seeded episode again, recorded step by step for the chart.
        path = plot_episode(args.name, args.plot, args.preset, args.seed, plan)
        print(f"\nchart of the episode: {path}")
    return 0


def _list(args: argparse.Namespace, plan: None = None) -> int:
    from deszoo.registry import list_envs

    print("\n".join(list_envs()))
    return 0


def _builds(make, name: str) -> None:
    """Build a user's env once, so a broken one is a one-line error before the work starts."""
    from deszoo.checks import build

    env = build(make, name)
    with contextlib.suppress(Exception):
        env.close()


def _check_run(args: argparse.Namespace) -> str:
    """Check ``deszoo run``'s arguments; return the policy (the heuristic when the env has
    one, unless ``--policy`` says)."""
    from deszoo.episodes import target

    what = target(args.name, args.preset)  # ConfigError: neither a scenario nor MODULE:ATTR
    if args.preset is not None:
        cliargs.check_preset(args.name, args.preset)
    if what.scenario is None:
        _builds(what.make, args.name)
    policy = args.policy or ("heuristic" if what.heuristic is not None else "random")
    if policy == "heuristic" and what.heuristic is None:
        raise ConfigError(f"argument --policy: {args.name} has no heuristic(obs, mask) in its "
                          "module; use --policy random")
    if args.plot is not None:
        cliargs.check_output_path(args.plot, "--plot", force=args.force)
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ConfigError(
                "argument --plot: drawing needs matplotlib: pip install 'deszoo[render]'"
            ) from None
    return policy


def _check_check(args: argparse.Namespace):
    from deszoo.checks import load

    try:
        return load(args.target)
    except ValueError as exc:
        raise ConfigError(f"argument MODULE:ATTR: {exc}") from None


def _run_check(args: argparse.Namespace, env_fn) -> int:
    from deszoo.checks import check, report

    print(f"checking {args.target} (seed {args.seed}, {args.steps} steps)")
    sys.stdout.flush()
    verdicts = check(env_fn, seed=args.seed, steps=args.steps,
                     episode_steps=args.episode_steps, episode_seconds=args.episode_seconds,
                     on_verdict=lambda v: print(report([v]), flush=True))
    failed = [v.name for v in verdicts if not v.ok]
    print(f"\n{len(verdicts) - len(failed)} of {len(verdicts)} checks passed"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _check_profile(args: argparse.Namespace) -> list[str]:
    """Check ``deszoo profile``'s arguments; return the vector modes to time."""
    from deszoo.bench.modes import available_modes

    cliargs.check_preset(args.name, args.preset or "default")
    discrete = True
    if ":" in args.name:  # built once: a broken env is a one-line error
        from gymnasium import spaces

        from deszoo.bench.modes import user_action_type

        kind = user_action_type(args.name, args.preset)
        discrete = kind is spaces.Discrete
    if args.no_vector:
        if args.modes:
            raise ConfigError("argument --modes: not with --no-vector")
        return []
    if not discrete:  # the vector rows' policy draws one legal action per row from the mask
        if args.modes:
            raise ConfigError(f"argument --modes: {args.name} has {kind.__name__} actions; "
                              "the vector rows need Discrete ones (use --no-vector)")
        print(f"note: {args.name} has {kind.__name__} actions: profiled without the vector "
              "rows (their policy needs Discrete actions)", file=sys.stderr)
        return []
    from deszoo.profile import DEFAULT_MODES

    modes = args.modes or [m for m in DEFAULT_MODES if m in available_modes()]
    bad = [m for m in modes if m not in available_modes() or m == "serial"]
    if bad:
        vector = [m for m in available_modes() if m != "serial"]
        raise ConfigError(f"argument --modes: unknown or unavailable mode(s) {bad}; "
                          f"available: {vector} (serial is the reference)")
    return modes


def _run_profile(args: argparse.Namespace, modes: list[str]) -> int:
    from deszoo.profile import format_report, profile

    with cliargs.stall_watch("deszoo profile") as note:

        def say(text: str) -> None:
            note(text)
            print(f"  {text} ...", file=sys.stderr, flush=True)

        report = profile(args.name, preset=args.preset, steps=args.steps,
                         num_envs=args.num_envs, modes=modes, num_workers=args.workers,
                         seed=args.seed, repeats=args.repeats, progress=say)
    print(format_report(report))
    return 0


SCORES_EPILOG = f"""\
policies:
  random           uniformly random legal actions (seeded with 0)
  heuristic        the scenario's built-in heuristic
  MODULE:ATTR      a callable policy(obs, mask) -> actions over the rows of a
                   vector env (obs (rows, obs_dim), mask bool (rows, n_actions)),
                   importable from the current folder
  PATH.zip         a model saved by Stable-Baselines3 (MaskablePPO from
                   sb3-contrib, or PPO), acting greedily; its training timesteps
                   are read from the model. Loading it runs code from the file
                   (a pickle): load only files you made or trust

seeds:
  One episode on each of the first N held-out seeds 10000, 10001, ... (default
  all 20). Training never uses them. The published scores page lists only entries
  on all 20 seeds at the preset's default config (the same work hash).

summary:
  deszoo scores --summary DIR prints, from the entries in DIR, each learner's
  normalised score (0 = random, 1 = heuristic) and paired difference to random
  per scenario and preset, and its interquartile mean across them with
  stratified bootstrap intervals. It needs random and heuristic entries.

Published scores: {doc("scores.md")}
and their entries: {repo("benchmarks/scores")}
"""


MAX_SCORE_SEEDS = 100_000
"""The most held-out seeds ``deszoo scores --seeds`` takes (their episodes run side by side;
the seeds stay far below ``2**32``)."""


def _check_scores(args: argparse.Namespace):
    """Check the ``deszoo scores`` arguments and load the policy: ``(policy, name, source,
    training)``; with ``--summary``, load the entries: ``("summary", entries, rejected)``."""
    if args.summary is not None:
        return _check_summary(args)
    if args.policy is None or args.name is None:
        missing = ", ".join(n for n, v in (("POLICY", args.policy), ("NAME", args.name))
                            if v is None)
        raise ConfigError(f"the following arguments are required: {missing} (or --summary)")
    cliargs.check_preset(args.name, args.preset)
    if args.seeds < 2:
        raise ConfigError(f"argument --seeds: a confidence interval needs at least 2 seeds, "
                          f"got {args.seeds}")
    if args.seeds > MAX_SCORE_SEEDS:
        raise ConfigError(f"argument --seeds: {args.seeds} is more than {MAX_SCORE_SEEDS:,}, "
                          "the most a score runs (one episode per seed, all at once in one "
                          "vector env)")
    from deszoo.policies import heuristic_policy, random_policy

    training = None
    if args.policy == "random":
        policy, name, source = random_policy(0), "random", "builtin:random"
    elif args.policy == "heuristic":
        try:
            policy = heuristic_policy(args.name)
        except ConfigError as exc:
            raise ConfigError(f"argument POLICY: {exc}; use random") from None
        name, source = "heuristic", "builtin:heuristic"
    elif args.policy.endswith(".zip") or Path(args.policy).is_file():
        policy, timesteps = _load_sb3(Path(args.policy), args.name, args.preset)
        name, source = Path(args.policy).stem, str(args.policy)
        training = {"algorithm": "saved SB3 model", "timesteps": timesteps,
                    "wall_s": args.train_wall}
    else:
        from deszoo.checks import load

        try:
            policy = load(args.policy)
        except ValueError as exc:
            raise ConfigError(
                f"argument POLICY: {exc}; expected random, heuristic, MODULE:ATTR or a saved "
                "SB3 model (.zip)"
            ) from None
        from deszoo.scores import checked_policy

        policy = checked_policy(policy, args.policy)  # ConfigError if not policy(obs, mask)
        name, source = args.policy, f"callable:{args.policy}"
    if args.train_wall is not None and training is None:
        raise ConfigError("argument --train-wall: only for a saved SB3 model")
    name = args.label or name
    from deszoo.scores import entry_path

    if not args.out.is_dir():
        raise ConfigError(f"argument --out: no folder {str(args.out)!r}")
    path = entry_path({"scenario": args.name, "preset": args.preset, "policy": name}, args.out)
    if path.exists() and not args.force:
        raise ConfigError(f"argument --out: {str(path)!r} exists; pass --force to replace it")
    return policy, name, source, training, path


def _check_summary(args: argparse.Namespace):
    """``deszoo scores --summary DIR``: no policy to score; the entries of DIR, of which
    some task has its random and heuristic entries."""
    if args.policy is not None:
        raise ConfigError("argument --summary: reads the entries of a folder; it takes no "
                          "POLICY or NAME")
    if not args.summary.is_dir():
        raise ConfigError(f"argument --summary: no folder {str(args.summary)!r}")
    from deszoo.aggregates import tasks_from
    from deszoo.scores import load

    entries, rejected = load(args.summary)
    if not tasks_from([e.data for e in entries]):
        left_out = "".join(f"; {path.name} left out: {'; '.join(errors)}"
                           for path, errors in rejected)
        raise ConfigError(f"argument --summary: no scenario and preset in {str(args.summary)!r} "
                          "has both a random and a heuristic entry on the 20 held-out seeds "
                          "(add them with `deszoo scores random NAME` and `deszoo scores "
                          f"heuristic NAME`){left_out}")
    return "summary", entries, rejected


def _run_summary(plan) -> int:
    """Print the aggregates across the tasks of the entries (the newest version of each
    scenario there), as the scores page shows them."""
    from deszoo.aggregates import newest_versions, render_section

    _, entries, rejected = plan
    for path, errors in rejected:
        print(f"{path}: left out: " + "; ".join(errors), file=sys.stderr)
    data = [e.data for e in entries]
    reasons = {(d["scenario"], d["preset"], d["policy"]): d["note"] for d in data
               if d.get("note")}
    lines = render_section(data, newest_versions({d["scenario"] for d in data}), reasons,
                           page=False)
    print("\n".join(lines).rstrip())
    return 0


def _load_sb3(path: Path, scenario: str, preset: str):
    """A saved SB3 model as a greedy policy over rows, and its training timesteps
    (``ConfigError`` unless its spaces are those of ``scenario``'s rows)."""
    if not path.is_file():
        raise ConfigError(f"argument POLICY: no file {str(path)!r}")
    try:
        import torch
        from sb3_contrib import MaskablePPO
        from stable_baselines3 import PPO
    except ImportError:
        raise ConfigError("argument POLICY: a saved model needs stable-baselines3 and "
                          "sb3-contrib: pip install 'deszoo[sb3]'") from None
    torch.set_num_threads(1)  # small nets, one row batch a step: threads only contend
    errors = []
    for cls in (MaskablePPO, PPO):
        try:
            model = cls.load(path, device="cpu")
        except Exception as exc:  # not a zip of this algorithm: try the next one
            errors.append(f"{cls.__name__}: {type(exc).__name__}")
            continue
        _check_model_spaces(model, path, scenario, preset)
        if cls is MaskablePPO:
            def policy(obs, mask, model=model):
                return model.predict(obs, action_masks=mask, deterministic=True)[0]
        else:
            def policy(obs, mask, model=model):
                return model.predict(obs, deterministic=True)[0]
        return policy, int(model.num_timesteps)
    raise ConfigError(f"argument POLICY: {str(path)!r} is not a saved MaskablePPO or PPO "
                      f"model ({', '.join(errors)})")


def _check_model_spaces(model, path: Path, scenario: str, preset: str) -> None:
    """A model trained on another task gets a one-line error, not a failure mid-score."""
    from deszoo.episodes import env_factory

    env = env_factory(scenario, preset)()
    try:
        rows = env.rows
        want = (rows.batch_observation_space(), rows.batch_action_space())
    finally:
        env.close()
    got = (model.observation_space, model.action_space)
    if got[0].shape != want[0].shape or got[1] != want[1]:
        raise ConfigError(
            f"argument POLICY: {str(path)!r} was trained on observations {got[0].shape} and "
            f"actions {got[1]}; {scenario} ({preset}) has rows of {want[0].shape} and "
            f"{want[1]}: a model of another scenario or preset?")


def _run_scores(args: argparse.Namespace, plan) -> int:
    """``deszoo scores``: evaluate, print mean and interval, write the entry."""
    import json

    from deszoo.scores import SEEDS, PolicyFailed, score

    if plan[0] == "summary":
        return _run_summary(plan)
    policy, name, source, training, path = plan
    seeds = range(SEEDS[0], SEEDS[0] + args.seeds)
    print(f"scoring {name} on {args.name} (preset {args.preset}), seeds "
          f"{seeds[0]}..{seeds[-1]}")
    sys.stdout.flush()
    try:
        entry = score(policy, args.name, args.preset, name=name, seeds=seeds, source=source,
                      training=training,
                      command=" ".join(["deszoo", *(args.argv or sys.argv[1:])]))
    except PolicyFailed as exc:  # the policy's own lines of the traceback, then one line
        import traceback

        cause = exc.__cause__
        if cause is not None:
            print("".join(traceback.format_exception(cause)).rstrip(), file=sys.stderr)
        print(cliargs.error_line(f"argument POLICY: {exc}", args.cmd_parser.prog),
              file=sys.stderr)
        return 2
    except InvalidActionError as exc:  # an action outside the space
        print(cliargs.error_line(f"argument POLICY: {args.policy} gave an invalid action: "
                                 f"{exc}", args.cmd_parser.prog), file=sys.stderr)
        return 2
    except ConfigError as exc:  # e.g. more envs than the machine has memory for
        print(cliargs.error_line(str(exc), args.cmd_parser.prog), file=sys.stderr)
        return 2
    lo, hi = entry["ci95"]
    print(f"mean return {entry['mean']:.2f}, 95% CI [{lo:.2f}, {hi:.2f}] "
          f"({len(seeds)} episodes, {entry['eval_wall_s']:.1f} s)")
    path.write_text(json.dumps(entry, indent=1) + "\n")
    print(f"entry: {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``deszoo`` parser. Each subcommand sets ``_parser`` (itself), ``_check`` (the
    checks that need more than argparse: they raise :class:`ConfigError` or return a plan)
    and ``_run`` (called with the arguments and the plan; returns the exit status)."""
    from deszoo.bench import cli as bench_cli

    parser = cliargs.ArgumentParser(prog="deszoo", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"deszoo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="play one seeded episode of a scenario's heuristic (or random) policy",
        description="Play one seeded episode of a scenario and print its figures: env\n"
        "steps, decisions, simulated time, SimPy events, the return of each agent.",
        epilog=lambda: RUN_EPILOG_HEAD + cliargs.presets_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("name", metavar="NAME",
                     help="the scenario, e.g. jobshop_v0 (all of them are listed below), or "
                     "your own env as MODULE:ATTR (as deszoo check takes it)")
    run.add_argument("--preset", default=None, metavar="P",
                     help="the scenario's preset (default: default; listed below)")
    run.add_argument("--seed", type=cliargs.seed, default=0, metavar="S",
                     help=f"episode seed, {cliargs.SEED_HELP} (default 0; see below)")
    run.add_argument("--policy", choices=["heuristic", "random"], default=None,
                     help="the env's heuristic (the default when its module has one), or "
                     "uniform random legal actions")
    run.add_argument("--plot", type=cliargs.image_file, nargs="?",
                     const=Path("deszoo-episode.png"), default=None, metavar="FILE",
                     help="also draw the episode as a chart (a Gantt chart for the job shop, "
                     "queues and waits over time, ...) into FILE (default "
                     "deszoo-episode.png)")
    run.add_argument("--max-steps", type=cliargs.positive_int, default=EPISODE_STEPS,
                     metavar="N", help="stop an episode that has not ended after N steps, "
                     f"with a message and exit status 1 (default {EPISODE_STEPS:_})")
    run.add_argument("--force", action="store_true", help="replace an existing --plot file")
    run.set_defaults(cmd_parser=run, cmd_check=_check_run, cmd_run=_run)

    chk = sub.add_parser(
        "check", help="check that your env is ready for parallel sampling (MODULE:ATTR)",
        description="Check a PettingZoo ParallelEnv (a class or zero-argument factory,\n"
        "importable from the current folder): PettingZoo's API and seed tests, observations\n"
        "in their spaces and legal masks over an episode, determinism (also against global\n"
        "random state), pickling, and bit-identical results on the vector backends.\n"
        "Exits 1 if any check fails.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    chk.add_argument("target", metavar="MODULE:ATTR",
                     help="e.g. my_model.env:MyEnv (an env class or a zero-argument factory)")
    chk.add_argument("--seed", type=cliargs.seed, default=0, metavar="S",
                     help=f"episode seed, {cliargs.SEED_HELP} (default 0)")
    chk.add_argument("--steps", type=cliargs.positive_int, default=200, metavar="N",
                     help="steps per episode checked (default 200)")
    chk.add_argument("--episode-steps", type=cliargs.positive_int, default=EPISODE_STEPS,
                     metavar="N", help="'episode ends' fails an episode not over after N "
                     f"steps (default {EPISODE_STEPS:_})")
    chk.add_argument("--episode-seconds", type=cliargs.positive_float,
                     default=EPISODE_SECONDS, metavar="S",
                     help="... or after S seconds of wall time, whichever comes first "
                     f"(default {EPISODE_SECONDS:g})")
    chk.set_defaults(cmd_parser=chk, cmd_check=_check_check, cmd_run=_run_check)

    lst = sub.add_parser("list", help="list the registered scenarios",
                         description="Print the registered scenarios, one a line.")
    lst.set_defaults(cmd_parser=lst, cmd_check=None, cmd_run=_list)

    sc = sub.add_parser(
        "scores",
        help="score a policy on a scenario's held-out seeds; write a JSON entry",
        description="Evaluate a policy on a scenario's held-out seeds (one episode each,\n"
        "return summed over agents), print the mean and its 95% t-interval, and write\n"
        "an entry SCENARIO-PRESET-POLICY.json into the current folder (--out).",
        epilog=SCORES_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sc.add_argument("policy", metavar="POLICY", nargs="?",
                    help="random, heuristic, MODULE:ATTR or a saved SB3 model (see below)")
    sc.add_argument("name", type=cliargs.env_name, metavar="NAME", nargs="?",
                    help="the scenario, e.g. loadbalance_v0, or your own env as MODULE:ATTR")
    sc.add_argument("--summary", type=Path, nargs="?", const=Path("."), default=None,
                    metavar="DIR",
                    help="score nothing: print the aggregates of the entries in DIR (default "
                    "the current folder): per scenario and preset the normalised score "
                    "(0 = random, 1 = heuristic) and the paired difference to random of "
                    "each learner, then each learner's IQM with bootstrap intervals")
    sc.add_argument("--preset", default="default", metavar="P",
                    help="the scenario's preset (default: default)")
    sc.add_argument("--seeds", type=cliargs.positive_int, default=20, metavar="N",
                    help="evaluate on the first N held-out seeds (default 20, at most "
                    f"{MAX_SCORE_SEEDS:,})")
    sc.add_argument("--label", default=None, metavar="NAME",
                    help="the policy's name in the entry and the tables (default: random, "
                    "heuristic, MODULE:ATTR, or the model file's stem)")
    sc.add_argument("--train-wall", type=cliargs.positive_float, default=None, metavar="S",
                    help="training wall seconds to record with a saved model")
    sc.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                    help="folder of the entries (default: the current folder)")
    sc.add_argument("--force", action="store_true", help="replace an existing entry")
    sc.set_defaults(cmd_parser=sc, cmd_check=_check_scores, cmd_run=_run_scores)

    prof = sub.add_parser(
        "profile",
        help="where an env's step goes (SimPy, the bridge, the model by function, the dict "
        "API, the vector transport) and what would pay most",
        description="Profile one env (a scenario or your own, MODULE:ATTR): record N steps\n"
        "of the random legal policy, time their replay through the array step, profile it\n"
        "with cProfile (parts by where the code lives, scaled to the timed step; a CPU-time\n"
        "sampler checks the shares), time the dict API and the vector transport at K envs,\n"
        "and name the two or three changes that would pay most. The figures are explained\n"
        f"in {doc('custom.md#speed')}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prof.add_argument("name", metavar="NAME", type=cliargs.env_name,
                      help="the scenario, e.g. jobshop_v0, or your own env as MODULE:ATTR "
                      "(importable from the current folder)")
    prof.add_argument("--preset", default=None, metavar="P",
                      help="the preset (default: default)")
    prof.add_argument("--steps", type=cliargs.positive_int, default=2000, metavar="N",
                      help="env steps recorded and replayed, autoresets included (default 2000)")
    prof.add_argument("--num-envs", type=cliargs.positive_int, default=8, metavar="K",
                      help="envs of the vector transport's rows (default 8)")
    prof.add_argument("--modes", type=cliargs.names, default=None, metavar="M,N",
                      help="vector modes timed against serial (default: roundrobin,shm)")
    prof.add_argument("--workers", type=cliargs.positive_int, default=None, metavar="W",
                      help="workers of the multiprocess modes (default: the usable cores, at "
                      "most one per env)")
    prof.add_argument("--no-vector", action="store_true", help="no vector transport rows")
    prof.add_argument("--seed", type=cliargs.seed, default=0, metavar="S",
                      help=f"env and policy seed, {cliargs.SEED_HELP} (default 0)")
    prof.add_argument("--repeats", type=cliargs.positive_int, default=3, metavar="R",
                      help="rounds of a timed and a profiled replay; the best of each is kept "
                      "(default 3)")
    prof.set_defaults(cmd_parser=prof, cmd_check=_check_profile, cmd_run=_run_profile)

    bench_cli.add_commands(sub)
    return parser


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 0
    args.argv = argv  # the command line, as results record it
    try:
        plan = args.cmd_check(args) if args.cmd_check else None
    except ConfigError as exc:
        print(cliargs.error_line(str(exc), args.cmd_parser.prog), file=sys.stderr)
        return 2
    code = args.cmd_run(args, plan)
    sys.stdout.flush()  # a closed pipe shows here, inside main, not at interpreter exit
    return code


def main(argv: list[str] | None = None) -> int:
    """Run ``deszoo`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("deszoo: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        if not cliargs.stdout_broken():
            raise
        cliargs.stdout_is_closed()
        return EXIT_PIPE


if __name__ == "__main__":
    sys.exit(main())
