"""The end-of-run table (rich), its legend and warnings, a Markdown table, and the scaling
plot (matplotlib).

The terminal table is compact by default (the columns that answer "which mode, and how much
faster than serial?", 80 columns wide) and has every column with ``wide=True``. Each row
carries flags (:data:`FLAGS`): a row measured while the machine had fewer free cores than
the row's workers, or whose repeats spread widely, is not to be trusted, and
:func:`load_warnings` says so in words.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path

from deszoo._links import doc
from deszoo.bench.modes import is_in_process

__all__ = [
    "BUSY_TOLERANCE",
    "COLUMNS",
    "DOCS",
    "FLAGS",
    "SPREAD_LIMIT",
    "caption",
    "conclusion",
    "failures",
    "free_cores",
    "legend",
    "load_warnings",
    "markdown_table",
    "plot_scaling",
    "print_report",
    "rich_table",
    "row_cells",
    "row_flags",
    "workers_cell",
]

DOCS = doc("benchmarks.md")
"""Where every column, flag and setting is explained (a URL: a wheel has no docs/)."""

SPREAD_LIMIT = 0.25
"""A row whose spread over repeats, ``(max - min) / median`` of env-steps/s, is above this is
flagged ``S``: its median is uncertain by more than about half this either way."""

BUSY_TOLERANCE = 0.25
"""A row is flagged ``B`` when the machine had more than this many cores fewer free than
the row needs: :func:`free_cores` below ``max(num_workers, 1) - BUSY_TOLERANCE``. The
tolerance absorbs the probe's own noise (an idle machine reads a little under its core
count)."""

FLAGS = {
    "B": f"busy: free cores more than {BUSY_TOLERANCE} short of the row's workers (at least 1)",
    "S": f"spread over repeats above {SPREAD_LIMIT:.0%}",
    "P": "worker processes seen differ from workers (e.g. run in the parent)",
    "X": "rewards differ from serial's: not the same trajectories",
}
"""Row flags of the table's ``flag`` column."""

COLUMNS = [
    ("scenario", "left"),
    ("mode", "left"),
    ("envs", "right"),
    ("workers", "right"),
    ("env-steps/s", "right"),
    ("±", "right"),
    ("agent-steps/s", "right"),
    ("sim-time/s", "right"),
    ("events/s", "right"),
    ("speedup", "right"),
    ("eff.", "right"),
    ("parent CPU µs/step", "right"),
    ("policy µs/step", "right"),
    ("RSS MiB parent/worker", "right"),
]
"""Every column (``--wide`` and ``--markdown``): name and justification."""

# The terminal's headers: the wide table's long names on two lines, so that no column is
# wider than its figures need.
_WIDE_HEADERS = {
    "env-steps/s": "env-\nsteps/s",
    "agent-steps/s": "agent-\nsteps/s",
    "sim-time/s": "sim-\ntime/s",
    "events/s": "events\n/s",
    "speedup": "speed-\nup",
    "parent CPU µs/step": "parent\nCPU\nµs/step",
    "policy µs/step": "policy\nµs/step",
    "RSS MiB parent/worker": "RSS MiB\nparent/\nworker",
}

_COMPACT = [
    ("scenario", "left"),
    ("mode", "left"),
    ("envs", "right"),
    ("workers", "right"),
    ("env-\nsteps/s", "right"),
    ("speed-up", "right"),
    ("parent\nµs/step", "right"),
    ("flag", "left"),
]

_LEGEND = [
    "speed-up: serial time / row time, ± spread of repeats",
    f"flags: B free cores < workers, S spread > {SPREAD_LIMIT:.0%}, P processes ≠ workers, "
    "X ≠serial",
    f"more: {DOCS}",
]
_WIDE_LEGEND = [
    "±: spread of the repeats, (max - min) / median; speedup: serial's time / this row's; "
    "eff.: speedup / max(workers, 1)",
    f"flags: B free cores < workers, S spread > {SPREAD_LIMIT:.0%}, P worker processes ≠ "
    "workers, X rewards ≠ serial's",
    f"every column: {DOCS}",
]


def legend(wide: bool = False) -> list[str]:
    """Three lines under the table: what speed-up, ± and the flags mean, and where to read
    more (the compact table's lines fit in 80 columns)."""
    return list(_WIDE_LEGEND if wide else _LEGEND)


def _n(x: float | None, fmt: str = ",.0f") -> str:
    return "-" if x is None else format(x, fmt)


def workers_cell(row: dict) -> str:
    """``-`` for in-process modes; the worker count, and the processes seen if they differ."""
    if is_in_process(row["mode"]):
        return "-"
    text = str(row["num_workers"])
    seen = row.get("worker_processes")
    if seen is not None and seen != row["num_workers"]:
        text += f" ({seen} proc)"
    return text


def row_cells(row: dict) -> list[str]:
    """A row's figures as the strings of :data:`COLUMNS`."""
    workers = workers_cell(row)
    scenario = f"{row['scenario']}/{row['preset']}"
    if row["status"] != "ok":
        return [scenario, row["mode"], str(row["num_envs"]), workers, "failed",
                *["-"] * (len(COLUMNS) - 5)]
    rss = _n(row["parent_peak_rss_mb"])
    if row["worker_peak_rss_mb"] is not None:
        rss += f"/{row['worker_peak_rss_mb']:.0f}"
    mismatch = "" if row["matches_serial"] in (True, None) else " (≠serial)"
    return [
        scenario,
        row["mode"] + mismatch,
        str(row["num_envs"]),
        workers,
        _n(row["env_steps_per_s"]),
        f"{row['spread'] * 100:.0f}%",
        _n(row["agent_steps_per_s"]),
        _n(row["sim_time_per_s"]),
        _n(row["events_per_s"]),
        "-" if row["speedup_vs_serial"] is None else f"{row['speedup_vs_serial']:.2f}x",
        _n(row["parallel_efficiency"], ".0%"),
        _n(row["parent_cpu_us_per_step"], ".1f"),
        _n(row["harness_us_per_step"], ".1f"),
        rss,
    ]


def free_cores(result: dict) -> float | None:
    """The fewer of the free cores measured before and after the run (None if unknown)."""
    m = result["machine"]
    readings = [x for x in (m.get("free_cores_start"), m.get("free_cores_end")) if x is not None]
    return min(readings) if readings else None


def row_flags(row: dict, free: float | None) -> str:
    """The row's :data:`FLAGS` letters; ``free`` is :func:`free_cores` of its result."""
    if row["status"] != "ok":
        return ""
    flags = ""
    if free is not None and free < max(row["num_workers"], 1) - BUSY_TOLERANCE:
        flags += "B"
    if row["spread"] is not None and row["spread"] > SPREAD_LIMIT:
        flags += "S"
    seen = row.get("worker_processes")
    if not is_in_process(row["mode"]) and seen is not None and seen != row["num_workers"]:
        flags += "P"
    if row["matches_serial"] is False:
        flags += "X"
    return flags


def _reading(x: float | None) -> str:
    return "?" if x is None else f"{x:.1f}"


def load_warnings(result: dict) -> list[str]:
    """Why some figures of ``result`` are not to be trusted, one message per cause: too few
    free cores for the rows flagged ``B``, too wide a spread for those flagged ``S``."""
    free = free_cores(result)
    rows = [r for r in result["rows"] if r["status"] == "ok"]
    out = []
    busy = [r for r in rows if "B" in row_flags(r, free)]
    if busy:
        m = result["machine"]
        need = max(max(r["num_workers"], 1) for r in busy)
        out.append(
            f"busy machine: {free:.1f} free cores (before the run "
            f"{_reading(m.get('free_cores_start'))}, after {_reading(m.get('free_cores_end'))}) "
            "for rows with "
            f"up to {need} workers; the {len(busy)} row(s) flagged B competed with other "
            "processes for CPU, so they understate what this machine does when idle: "
            "rerun them when it is"
        )
    spread = [r for r in rows if r["spread"] is not None and r["spread"] > SPREAD_LIMIT]
    if spread:
        worst = max(r["spread"] for r in spread)
        out.append(
            f"unsteady timing: {len(spread)} row(s) flagged S vary by more than "
            f"{SPREAD_LIMIT:.0%} between repeats (up to {worst:.0%}), so their medians are "
            "uncertain; an idle machine or more --repeats help"
        )
    return out


WIN = 1.05
"""A mode *pays* on a work when its speed-up over serial is at least this."""


def _mode_text(row: dict) -> str:
    if is_in_process(row["mode"]):
        return row["mode"]
    w = row["num_workers"]
    return f"{row['mode']} with {w} worker{'s' if w != 1 else ''}"


def conclusion(result: dict) -> str | None:
    """One line: what the table means for this machine. The best vector mode of each work
    and its speed-up over serial; where none reached :data:`WIN`, why (free cores during
    the run, the spread of the repeats, a step too cheap for a vector step) and what to run
    instead. ``None`` when no row has a speed-up (serial alone, or failed rows)."""
    rows = [r for r in result["rows"] if r["status"] == "ok" and r["mode"] != "serial"
            and r["speedup_vs_serial"] is not None]
    if not rows:
        return None
    best: dict[str, dict] = {}
    for r in rows:
        key = f"{r['scenario']}/{r['preset']}"
        if key not in best or r["speedup_vs_serial"] > best[key]["speedup_vs_serial"]:
            best[key] = r
    won = {k: r for k, r in best.items() if r["speedup_vs_serial"] >= WIN}
    lost = {k: r for k, r in best.items() if k not in won}
    parts = [f"{_mode_text(r)} is fastest on {k}, {_ratio(r['speedup_vs_serial'])} serial"
             for k, r in won.items()]
    free = free_cores(result)
    if won and not lost:
        text = "; ".join(parts)
        if free is not None and any(free < max(r["num_workers"], 1) - BUSY_TOLERANCE
                                    for r in won.values()):
            text += f" (with {free:.1f} free cores: an idle machine does better)"
        return f"conclusion: parallel sampling pays here: {text}"
    loser = max(lost.values(), key=lambda r: r["speedup_vs_serial"])
    names = ", ".join(lost)
    text = (f"no vector mode beat serial on {names} (best: {_mode_text(loser)}, "
            f"{_ratio(loser['speedup_vs_serial'])})")
    why, instead = [], []
    cores = result["machine"].get("usable_cores")
    need = max(max(r["num_workers"], 1) for r in rows)
    if free is not None and free < need - BUSY_TOLERANCE:
        of = f" of {cores}" if cores else ""
        why.append(f"only {free:.1f}{of} cores were free during the run")
        instead.append("an idle machine")
        fit = max(1, int(free + BUSY_TOLERANCE))  # workers the free cores could hold
        ran = [r["num_workers"] for r in rows if r["num_workers"] > 0]
        if ran and min(ran) > fit:  # (rows with that few workers ran: nothing to suggest)
            instead.append(f"fewer workers (--workers {fit})")
    spread = max((r["spread"] or 0.0 for r in result["rows"] if r["status"] == "ok"),
                 default=0.0)
    if spread > SPREAD_LIMIT:
        why.append(f"the repeats spread up to {spread:.0%}")
        instead.append("more --repeats")
    serial = [r for r in result["rows"] if r["status"] == "ok" and r["mode"] == "serial"
              and f"{r['scenario']}/{r['preset']}" in lost]
    if serial:
        us = min(1e6 / r["env_steps_per_s"] for r in serial)
        envs = max(r["num_envs"] for r in rows)
        if not why or us < 200:
            why.append(f"a step takes {us:.0f} us, little against what a vector step "
                       "adds per env")
            instead.append(f"more envs per worker (--num-envs {envs * 4})")
    head = "conclusion: " + "; ".join([*parts, text])
    if why:
        said = why[0] if len(why) == 1 else ", ".join(why[:-1]) + " and " + why[-1]
        head += f": {said}; run instead with {', '.join(instead)}"
    return head


def _works_text(result: dict) -> str:
    works = list(result["works"].values())
    steps = {w["env_steps"] for w in works}
    if len(steps) == 1:
        return f"{steps.pop()} env steps per row"
    each = ", ".join(f"{w['env_steps']} for {w['scenario']}/{w['preset']}" for w in works)
    return f"env steps per row: {each}"


def caption(result: dict) -> str:
    """One line: machine, load before and after, work size, repeats and work hash."""
    m = result["machine"]
    load = m.get("load_average_start")
    load_end = m.get("load_average_end")
    loads = ""
    if load and load_end:
        loads = f", load {load[0]:.2f} -> {load_end[0]:.2f}"
    free, free_end = m.get("free_cores_start"), m.get("free_cores_end")
    if free is not None and free_end is not None:
        loads += f", free cores {free:.1f} -> {free_end:.1f}"
    return (
        f"{m['cpu_model']}, {m['usable_cores']} usable cores, Python {m['python']}{loads}; "
        f"{_works_text(result)}, median of {result['settings']['repeats']} repeats; "
        f"work hash {result['work_hash']}"
    )


def _rate(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x:,.0f}"


def _ratio(x: float) -> str:
    return f"{x:.2f}x" if x < 10 else f"{x:.1f}x" if x < 100 else f"{x:.0f}x"


def _us(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}" if x < 100 else f"{x:,.0f}"


def _spread(x: float) -> str:
    pct = f"{x * 100:.0f}%"
    return f"±{pct:>3}"  # ±12%, ± 6%: the column stays aligned on the speed-up's x


def _compact_cells(row: dict, free: float | None) -> list[str]:
    """A row as the strings of the compact table (the scenario cell is filled in later)."""
    workers = "-" if is_in_process(row["mode"]) else str(row["num_workers"])
    head = ["", row["mode"], str(row["num_envs"]), workers]
    if row["status"] != "ok":
        return [*head, "failed", "-", "-", ""]
    speedup = "-" if row["speedup_vs_serial"] is None else _ratio(row["speedup_vs_serial"])
    return [
        *head,
        _rate(row["env_steps_per_s"]),
        f"{speedup} {_spread(row['spread'])}",
        _us(row["parent_cpu_us_per_step"]),
        row_flags(row, free),
    ]


def _labels(rows: list[dict]) -> list[tuple[str, bool]]:
    """The scenario column: ``scenario`` on the first row of each run of rows with the same
    work, ``/preset`` on the second, nothing below (narrower than ``scenario/preset`` on
    every row); and whether the row ends its run."""
    keys = [(r["scenario"], r["preset"]) for r in rows]
    out = []
    for i, (scenario, preset) in enumerate(keys):
        first = i == 0 or keys[i - 1] != keys[i]
        second = not first and (i == 1 or keys[i - 2] != keys[i])
        last = i == len(keys) - 1 or keys[i + 1] != keys[i]
        if first and last:
            text = f"{scenario}\n/{preset}"
        else:
            text = scenario if first else f"/{preset}" if second else ""
        out.append((text, last))
    return out


def rich_table(result: dict, wide: bool = False, tight: bool = False):
    """The result's rows as a :class:`rich.table.Table` with :func:`caption` below.

    Compact (the default): scenario and preset, mode, envs, workers, env-steps/s, speed-up
    over serial with the spread of the repeats, parent CPU per step and the flags; it fits
    in 80 columns. ``wide``: every column of :data:`COLUMNS`, and the flags. ``tight``: one
    space between columns instead of two.
    """
    from rich import box
    from rich.table import Table

    table = Table(title="deszoo bench", caption=caption(result), caption_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True, padding=(0, 0) if tight else (0, 1))
    columns = ([(_WIDE_HEADERS.get(n, n), j) for n, j in COLUMNS] + [("flag", "left")]
               if wide else _COMPACT)
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True, overflow="fold")
    free = free_cores(result)
    rows = result["rows"]
    for row, (label, last) in zip(rows, _labels(rows), strict=True):
        if wide:
            cells = [label, *row_cells(row)[1:], row_flags(row, free)]
        else:
            cells = _compact_cells(row, free)
            cells[0] = label
        table.add_row(*cells, end_section=last)
    return table


def print_report(console, result: dict, wide: bool = False) -> None:
    """Print the table, its caption and :func:`legend` on a rich ``console``.

    No figure is ever cut to ``…``: if the table does not fit the console it is tried with
    one space between columns, and if that does not fit either it is printed at its own
    width (the terminal then wraps its lines).
    """
    from rich.measure import Measurement

    options = console.options.update_width(10_000)
    for tight in (False, True):
        table = rich_table(result, wide=wide, tight=tight)
        need = Measurement.get(console, options, table).maximum
        if need <= console.width:
            break
    width = console.width
    try:
        console.width = max(width, need)
        console.print(table, crop=False)
    finally:
        console.width = width
    for line in legend(wide):
        console.print(line, style="dim", highlight=False, markup=False,
                      crop=False, soft_wrap=True)


def failures(result: dict) -> list[str]:
    """One line per failed row: its configuration and error."""
    return [
        f"{r['scenario']}/{r['preset']} {r['mode']} envs={r['num_envs']} "
        f"workers={r['num_workers']}: {r['error']}"
        for r in result["rows"]
        if r["status"] != "ok"
    ]


def markdown_table(rows: list[dict], columns=COLUMNS, cells=row_cells) -> str:
    """Rows as a GitHub Markdown table."""
    head = [name for name, _ in columns]
    align = ["---:" if j == "right" else "---" for _, j in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells(row)) + " |")
    return "\n".join(lines)


def plot_scaling(result: dict, path: str | Path) -> Path:
    """Env-steps/s against workers and against ``num_envs``, one line per mode.

    One figure row per scenario and preset. Against ``num_workers`` at the largest
    ``num_envs`` (modes that run in the parent are flat dashed lines); against ``num_envs``
    at the most workers. An axis with a single value in the result gets no panel (a result
    with one value on both gets the workers panel). Points are medians; error bars reach
    from the slowest to the fastest repeat.
    """
    try:
        from matplotlib.figure import Figure  # no pyplot: leaves the user's backend alone
    except ImportError:
        raise ImportError(
            "--plot needs matplotlib: pip install 'deszoo[bench]' (or matplotlib)"
        ) from None

    groups: dict[str, list[dict]] = defaultdict(list)
    for row in result["rows"]:
        if row["status"] == "ok":
            groups[f"{row['scenario']}/{row['preset']}"].append(row)
    ok = [r for rows in groups.values() for r in rows]
    show_n = len({r["num_envs"] for r in ok}) > 1
    show_w = len({r["num_workers"] for r in ok if not is_in_process(r["mode"])}) > 1
    show_w = show_w or not show_n
    n = max(len(groups), 1)
    cols = int(show_w) + int(show_n)
    fig = Figure(figsize=(5.5 * cols, 3.6 * n + 0.6), layout="constrained")
    axes = fig.subplots(n, cols, squeeze=False)
    for (name, rows), panel in zip(sorted(groups.items()), axes, strict=False):
        panel = list(panel)
        ax_w = panel.pop(0) if show_w else None
        ax_n = panel.pop(0) if show_n else None
        _plot_group(name, rows, ax_w, ax_n)
    title = (f"{caption(result)}. Points: median env-steps/s; error bars: slowest to "
             "fastest repeat.")
    fig.suptitle(textwrap.fill(title, 80 * cols), fontsize="small")
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


def _yerr(rows: list[dict]) -> list[list[float]]:
    """Error bars from the slowest to the fastest repeat, around the median."""
    return [[r["env_steps_per_s"] - r["env_steps_per_s_min"] for r in rows],
            [r["env_steps_per_s_max"] - r["env_steps_per_s"] for r in rows]]


def _dodge(xs: list[float], shift: float, log: bool) -> list[float]:
    """``xs`` moved sideways by ``shift`` (a fraction of a unit, or of a doubling on a log
    axis), so that the error bars of modes at the same x do not hide each other."""
    return [x * 2 ** shift if log else x + shift for x in xs]


def _points(ax, xs: list[float], rows: list[dict], style: str, label: str) -> None:
    """Medians joined by a line, with error bars."""
    if rows:
        ax.errorbar(xs, [r["env_steps_per_s"] for r in rows], yerr=_yerr(rows), fmt=style,
                    capsize=3, label=label)


def _plot_group(name: str, rows: list[dict], ax_w, ax_n) -> None:
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    n_max = max(r["num_envs"] for r in rows)
    w_all = sorted({r["num_workers"] for r in rows if not is_in_process(r["mode"])}) or [1]
    w_max = max(w_all)
    w_span = (w_max - min(w_all)) or 1
    for i, mode in enumerate(modes):
        shift = 0.04 * (i - (len(modes) - 1) / 2)  # this mode's sideways dodge
        mine = [r for r in rows if r["mode"] == mode]
        at_n = sorted((r for r in mine if r["num_envs"] == n_max),
                      key=lambda r: r["num_workers"])
        if is_in_process(mode):
            if at_n and ax_w is not None:
                # A flat dashed line across the workers axis, its error bar at the left end.
                x0 = _dodge([min(w_all)], shift * w_span, False)
                line = ax_w.errorbar(x0, [at_n[0]["env_steps_per_s"]],
                                     yerr=_yerr(at_n[:1]), fmt="s", capsize=3, label=mode)
                ax_w.plot([min(w_all), max(w_all)], [at_n[0]["env_steps_per_s"]] * 2, "--",
                          color=line.lines[0].get_color())
            by_n = sorted(mine, key=lambda r: r["num_envs"])
        else:
            if ax_w is not None:
                _points(ax_w, _dodge([r["num_workers"] for r in at_n], shift * w_span, False),
                        at_n, "o-", mode)
            by_n = sorted((r for r in mine if r["num_workers"] == w_max),
                          key=lambda r: r["num_envs"])
        if ax_n is not None:
            _points(ax_n, _dodge([r["num_envs"] for r in by_n], shift, True), by_n,
                    "s--" if is_in_process(mode) else "o-", mode)
    if ax_w is not None:
        ax_w.set(title=f"{name}: {n_max} envs", xlabel="workers", ylabel="env-steps/s",
                 xticks=w_all)
    if ax_n is not None:
        ax_n.set(title=f"{name}: {w_max} workers (multiprocess modes)", xlabel="num_envs",
                 ylabel="env-steps/s")
        ns = sorted({r["num_envs"] for r in rows})
        ax_n.set_xscale("log", base=2)
        ax_n.set_xticks(ns, labels=[str(x) for x in ns])
        ax_n.minorticks_off()
    for ax in (ax_w, ax_n):
        if ax is not None:
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize="small")
