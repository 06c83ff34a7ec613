"""The leaderboard: validated result files ranked per scenario, rendered as Markdown.

Every ``*.json`` in the leaderboard folder must follow :mod:`deszoo.bench.schema` and have
done the standard work (:func:`deszoo.bench.work.standard_work`) for every row, so that
entries from different machines compare like with like. Produce one with
``deszoo bench --standard --out benchmarks/leaderboard/NAME.json``.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from deszoo.bench.report import _n, workers_cell
from deszoo.bench.schema import validate
from deszoo.bench.work import standard_work

__all__ = [
    "DEFAULT_DIR",
    "DEFAULT_OUT",
    "Entry",
    "Rejected",
    "code_cell",
    "load",
    "render",
    "standard_errors",
]

DEFAULT_DIR = Path("benchmarks/leaderboard")
DEFAULT_OUT = Path("docs/leaderboard.md")


@dataclass
class Entry:
    path: Path
    result: dict


@dataclass
class Rejected:
    path: Path
    errors: list[str]

    def message(self) -> str:
        lines = [f"{self.path}: rejected"]
        lines += [f"  - {e}" for e in self.errors]
        return "\n".join(lines)


def standard_errors(result: dict) -> list[str]:
    """Why ``result`` (already schema-valid) did not do the leaderboard's standard work."""
    errors = []
    for key, work in sorted(result["works"].items()):
        std = standard_work(work["scenario"], work["preset"])
        if key == std.hash:
            continue
        expected = std.to_dict()
        diffs = [
            f"{k} {work.get(k)!r} (standard: {expected[k]!r})"
            for k in expected
            if work.get(k) != expected[k]
        ]
        errors.append(
            f"work hash {key} for {work['scenario']}/{work['preset']} differs from the "
            f"leaderboard's {std.hash}: " + (", ".join(diffs) or "a different hash function")
            + "; run `deszoo bench --standard` to produce a comparable entry"
        )
    ok_rows = [r for r in result["rows"] if r["status"] == "ok"]
    if not ok_rows:
        errors.append("no row with status 'ok'")
    return errors


def load(directory: str | Path = DEFAULT_DIR) -> tuple[list[Entry], list[Rejected]]:
    """Every result file in ``directory``: the accepted ones and the rejected ones."""
    directory = Path(directory)
    entries, rejected = [], []
    seen: dict[str, Path] = {}  # a result's canonical JSON -> its first file
    for path in sorted(directory.glob("*.json")):
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            rejected.append(Rejected(path, [f"not readable JSON: {exc}"]))
            continue
        errors = validate(result)
        if not errors:
            errors = standard_errors(result)
        if not errors:
            same = seen.setdefault(json.dumps(result, sort_keys=True), path)
            if same != path:
                errors = [f"the same result as {same.name} (each run once)"]
        if errors:
            rejected.append(Rejected(path, errors))
        else:
            entries.append(Entry(path, result))
    return entries, rejected


RANK_COLUMNS = [
    ("#", "right"),
    ("env-steps/s", "right"),
    ("±", "right"),
    ("mode", "left"),
    ("envs", "right"),
    ("workers", "right"),
    ("speedup vs serial", "right"),
    ("eff.", "right"),
    ("parent µs/step", "right"),
    ("events/s", "right"),
    ("deszoo", "left"),
    ("machine", "left"),
    ("entry", "left"),
]


def _machine_short(m: dict) -> str:
    return f"{m['cpu_model']}, {m['usable_cores']} cores, py {m['python']}"


def code_cell(result: dict) -> str:
    """The deszoo version and commit that measured ``result``: ``0.1.0 @ 154ac58``.

    A ``deszoo.bench/1`` file recorded no commit (and its version only among the machine's
    packages): ``0.1.0, commit not recorded``.
    """
    if "commit" in result:
        version, commit = result["deszoo_version"], result["commit"]
        return f"{version}, commit unknown" if commit == "unknown" else f"{version} @ {commit}"
    version = result["machine"]["packages"].get("deszoo")
    return f"{version}, commit not recorded" if version else "version and commit not recorded"


def ranking(entries: list[Entry]) -> dict[tuple[str, str], list[tuple[dict, Entry]]]:
    """Rows of every entry grouped by (scenario, preset), fastest first."""
    groups: dict[tuple[str, str], list[tuple[dict, Entry]]] = defaultdict(list)
    for entry in entries:
        for row in entry.result["rows"]:
            if row["status"] == "ok":
                groups[(row["scenario"], row["preset"])].append((row, entry))
    for rows in groups.values():
        rows.sort(key=lambda re: (-re[0]["env_steps_per_s"], re[1].path.name, re[0]["mode"]))
    return dict(sorted(groups.items()))


def render(entries: list[Entry], out: Path | None = None) -> str:
    """``docs/leaderboard.md``: a ranked table per scenario, then the machines; entries
    are linked relative to ``out``'s folder (default: the repository's docs/)."""

    def link(entry: Entry) -> str:
        if out is None:
            return f"../benchmarks/leaderboard/{entry.path.name}"
        return Path(os.path.relpath(entry.path.resolve(), out.resolve().parent)).as_posix()

    lines = [
        "# Leaderboard",
        "",
        "<!-- Generated by `deszoo leaderboard --dir benchmarks/leaderboard --out "
        "docs/leaderboard.md`; do not edit by hand. -->",
        "",
        "Configurations ranked by env steps per wall second on the standard work: the "
        "scenario at its preset, "
        f"{standard_work('x').env_steps} env steps per row split over `envs` envs, seed "
        f"{standard_work('x').seed}, uniform random legal actions drawn before the timed "
        "region (see [benchmarks.md](benchmarks.md)). Every entry's work hash was checked "
        "against the standard one. Add an entry with "
        "`deszoo bench --standard --out benchmarks/leaderboard/NAME.json`, then run "
        "`deszoo leaderboard --dir benchmarks/leaderboard --out docs/leaderboard.md`.",
        "",
        "The `deszoo` column names the version and git commit that measured each entry "
        "(`+dirty`: with local changes; `commit unknown`: not run from a git checkout; "
        "`commit not recorded`: a `deszoo.bench/1` file, written before entries recorded it). "
        "Rows measured on different commits compare the code as well as the configuration.",
        "",
    ]
    if not entries:
        lines += ["No entries yet.", ""]
        return "\n".join(lines)
    for (scenario, preset), rows in ranking(entries).items():
        work = standard_work(scenario, preset)
        lines += [f"## {scenario} / {preset}", "", f"Work hash `{work.hash}`.", ""]
        head = [name for name, _ in RANK_COLUMNS]
        align = ["---:" if j == "right" else "---" for _, j in RANK_COLUMNS]
        lines += ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
        for rank, (row, entry) in enumerate(rows, 1):
            speedup = row["speedup_vs_serial"]
            cells = [
                str(rank),
                _n(row["env_steps_per_s"]),
                f"{row['spread'] * 100:.0f}%",
                row["mode"],
                str(row["num_envs"]),
                workers_cell(row),
                "-" if speedup is None else f"{speedup:.2f}x",
                _n(row["parallel_efficiency"], ".0%"),
                _n(row["parent_cpu_us_per_step"], ".1f"),
                _n(row["events_per_s"]),
                code_cell(entry.result),
                _machine_short(entry.result["machine"]),
                f"[{entry.path.stem}]({link(entry)})",
            ]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
    lines += ["## Entries", ""]
    lines += ["| entry | created | deszoo | machine | memory | OS | packages | "
              "load before/after |",
              "|---|---|---|---|---:|---|---|---|"]
    for entry in entries:
        r = entry.result
        m = r["machine"]
        pk = ", ".join(f"{k} {v}" for k, v in m["packages"].items() if v)
        load = "/".join(
            "-" if x is None else f"{x[0]:.2f}"
            for x in (m["load_average_start"], m["load_average_end"])
        )
        label = f" ({m['label']})" if m.get("label") else ""
        lines.append(
            f"| {entry.path.stem}{label} | {r['created']} | {code_cell(r)} | "
            f"{_machine_short(m)} | "
            f"{_n(m['memory_gib'], '.1f')} GiB | {m['os']} | {pk} | {load} |"
        )
    lines.append("")
    return "\n".join(lines)
