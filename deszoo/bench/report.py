"""The end-of-run table (rich), a Markdown table, and the scaling plot (matplotlib)."""

from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path

from deszoo.bench.modes import is_in_process

__all__ = [
    "COLUMNS",
    "caption",
    "failures",
    "markdown_table",
    "plot_scaling",
    "rich_table",
    "row_cells",
    "workers_cell",
]

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
    steps = sorted({w["env_steps"] for w in result["works"].values()})
    return (
        f"{m['cpu_model']}, {m['usable_cores']} usable cores, Python {m['python']}{loads}; "
        f"{'/'.join(map(str, steps))} env steps per row, median of "
        f"{result['settings']['repeats']} repeats; work hash {result['work_hash']}"
    )


def rich_table(result: dict):
    """The result's rows as a :class:`rich.table.Table`, with :func:`caption` below."""
    from rich.table import Table

    table = Table(title="deszoo bench", caption=caption(result), show_lines=False)
    for name, justify in COLUMNS:
        table.add_column(name, justify=justify, no_wrap=name in ("scenario", "mode"))
    for row in result["rows"]:
        table.add_row(*row_cells(row))
    return table


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
    with one value on both gets the workers panel).
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
    fig = Figure(figsize=(5.5 * cols, 3.6 * n + 0.4), layout="constrained")
    axes = fig.subplots(n, cols, squeeze=False)
    for (name, rows), panel in zip(sorted(groups.items()), axes, strict=False):
        panel = list(panel)
        ax_w = panel.pop(0) if show_w else None
        ax_n = panel.pop(0) if show_n else None
        _plot_group(name, rows, ax_w, ax_n)
    fig.suptitle(textwrap.fill(caption(result), 80 * cols), fontsize="small")
    path = Path(path)
    fig.savefig(path, dpi=110)
    return path


def _plot_group(name: str, rows: list[dict], ax_w, ax_n) -> None:
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    n_max = max(r["num_envs"] for r in rows)
    w_all = sorted({r["num_workers"] for r in rows if not is_in_process(r["mode"])}) or [1]
    w_max = max(w_all)
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        at_n = sorted((r for r in mine if r["num_envs"] == n_max),
                      key=lambda r: r["num_workers"])
        if is_in_process(mode):
            if at_n and ax_w is not None:
                ax_w.plot([min(w_all), max(w_all)], [at_n[0]["env_steps_per_s"]] * 2,
                          "s--", label=mode, markevery=[0])
            by_n = sorted(mine, key=lambda r: r["num_envs"])
        else:
            if ax_w is not None:
                ax_w.plot([r["num_workers"] for r in at_n],
                          [r["env_steps_per_s"] for r in at_n], "o-", label=mode)
            by_n = sorted((r for r in mine if r["num_workers"] == w_max),
                          key=lambda r: r["num_envs"])
        if ax_n is not None:
            ax_n.plot([r["num_envs"] for r in by_n], [r["env_steps_per_s"] for r in by_n],
                      "s--" if is_in_process(mode) else "o-", label=mode)
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
