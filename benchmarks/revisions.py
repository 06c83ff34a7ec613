"""Run one measurement in several deszoo trees side by side, alternating, best of several.

``benchmarks/bridge.py`` and ``benchmarks/step_cost.py`` measure the tree they are run from,
or, given ``--rev A --rev B``, check out each git revision into a temporary folder and run
the same measurement there in a fresh interpreter (``PYTHONPATH`` set to that tree), the
revisions taking turns round after round so that a change in the machine's load hits both.
Each round prints one JSON object; the best (lowest) figure of each key over the rounds is
kept, as noise on a shared machine only ever adds time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["ROOT", "add_options", "best_of", "checkout", "report", "run_revisions"]


def checkout(rev: str, into: Path) -> Path:
    """The files of git revision ``rev`` (``"."``: the working tree) under ``into``."""
    if rev == ".":
        return ROOT
    sha = subprocess.run(["git", "rev-parse", "--verify", rev + "^{commit}"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout.strip()
    tree = into / sha[:12]
    if not tree.exists():
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        tree.mkdir(parents=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def best_of(rounds: Sequence[dict[str, float]]) -> dict[str, float]:
    """Per key, the lowest value over the rounds."""
    keys = rounds[0].keys()
    return {k: min(r[k] for r in rounds) for k in keys}


def run_revisions(script: Path, revs: Sequence[str], rounds: int, args: Sequence[str],
                  progress: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Run ``script --one <args>`` in each revision's tree, ``rounds`` times in turn.

    Returns ``{rev: best_of(rounds)}``. The script must print one JSON object per run.
    """
    tmp = Path(tempfile.mkdtemp(prefix="deszoo-revs-"))
    try:
        trees = {rev: checkout(rev, tmp) for rev in revs}
        results: dict[str, list[dict]] = {rev: [] for rev in revs}
        for r in range(rounds):
            order = revs if r % 2 == 0 else list(reversed(revs))
            for rev in order:
                env = dict(os.environ, PYTHONPATH=str(trees[rev]))
                out = subprocess.run([sys.executable, str(script), "--one", *args],
                                     env=env, cwd=trees[rev], capture_output=True, text=True)
                if out.returncode != 0:
                    raise RuntimeError(f"{script.name} in {rev} failed:\n{out.stderr[-3000:]}")
                results[rev].append(json.loads(out.stdout.strip().splitlines()[-1]))
                if progress is not None:
                    progress(f"round {r + 1}/{rounds} {rev} done")
        return {rev: best_of(results[rev]) for rev in revs}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def add_options(parser: argparse.ArgumentParser) -> None:
    """``--rev``, ``--rounds``, ``--json`` and the hidden ``--one`` of a script that can
    compare revisions (see :func:`report`)."""
    parser.add_argument("--rev", action="append", default=[],
                        help="git revision to measure ('.' is the working tree); repeat to "
                             "compare, alternating; default: this tree in this process")
    parser.add_argument("--rounds", type=int, default=3,
                        help="with --rev: rounds of alternation (best kept)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)


def report(script: Path, args: argparse.Namespace, passed: Sequence[str],
           measure: Callable[[], dict[str, float]],
           table: Callable[[dict[str, dict]], str]) -> None:
    """Run a script's measurement as its options say: ``--one`` prints ``measure()`` as
    JSON (a round of :func:`run_revisions`); ``--rev`` runs ``script`` with ``passed`` in
    each revision; else this tree is measured here. Prints ``table(results)``; ``--json``
    also writes them."""
    if args.one:
        print(json.dumps(measure()))
        return
    if args.rev:
        results = run_revisions(script, args.rev, args.rounds, passed,
                                progress=lambda s: print(s, file=sys.stderr))
    else:
        results = {"this tree": measure()}
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
