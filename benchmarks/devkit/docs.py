"""Scenario pages, generated: ``docs/envs/<name>.md`` from each scenario's module docstring
and its declared parameters, so the documentation has one source.

``python benchmarks/devkit/docs.py`` writes the pages; with ``--check`` it fails if one is
out of date (``tests/test_docs.py`` runs it). A scenario's adapter docstring
(``deszoo/envs/<name>/env.py``) is laid out as PettingZoo's env docstrings are: a summary
line, paragraphs, one table (reStructuredText simple table), more paragraphs, a
``Presets:`` paragraph and ``Version History:``. The parameters table comes from the
scenario's ``params`` (and the bridge's), the presets table from its ``presets``.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from pathlib import Path
from typing import Any

from deszoo.registry import env_module, latest_versions

__all__ = ["scenario_page", "write_pages"]

ROOT = Path(__file__).resolve().parents[2]  # the repository
DOCS = ROOT / "docs" / "envs"


def _md(text: str) -> str:
    """reST inline markup to Markdown: ``code`` -> `code`."""
    return re.sub(r"``(.+?)``", r"`\1`", text)


def _paragraphs(text: str) -> list[str]:
    return [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]


def _rst_table(lines: list[str]) -> str:
    """A two-column reST simple table (``====  ====`` rules) as a Markdown table."""
    rule = lines[0]
    split = rule.index(" ", rule.index("=")) + 1
    while split < len(rule) and rule[split] == " ":
        split += 1
    rows: list[list[str]] = []
    for line in lines[1:-1]:
        if set(line.strip()) <= {"="}:
            continue
        key, value = line[:split].strip(), line[split:].strip()
        if key:
            rows.append([key, value])
        elif rows:
            rows[-1][1] += " " + value
    out = ["| | |", "|---|---|"]
    out += [f"| {_md(k)} | {_md(v).replace('|', chr(92) + '|')} |" for k, v in rows]
    return "\n".join(out)


def _value(v: Any) -> str:
    if isinstance(v, str):
        return f'`"{v}"`'
    return f"`{v!r}`"


def scenario_page(name: str) -> str:
    """The Markdown page of scenario ``name``."""
    module = env_module(name)
    cls = module.parallel_env
    adapter = importlib.import_module(cls.__module__)
    doc = adapter.__doc__ or ""
    head, _, rest = doc.partition("\n")
    lines = rest.split("\n")
    rules = [i for i, line in enumerate(lines) if line.startswith("=") and set(line) <= {"=", " "}]
    before = "\n".join(lines[: rules[0]]) if rules else rest
    table = _rst_table(lines[rules[0] : rules[-1] + 1]) if rules else ""
    after = "\n".join(lines[rules[-1] + 1 :]) if rules else ""
    after, _, history = after.partition("Version History:")
    after, _, presets_text = after.partition("Presets:")
    short = name.rsplit("_", 1)[0]
    out = [f"# {name}: {_md(head.strip().rstrip('.'))}", ""]
    out += ["```python", "import deszoo", "",
            f'env = deszoo.make("{name}", preset="small")', "obs, infos = env.reset(seed=0)",
            "```", ""]
    out += [_md(p) + "\n" for p in _paragraphs(before)]
    if table:
        out += [table, ""]
    out += [_md(p) + "\n" for p in _paragraphs(after)]
    out += ["## Arguments", "",
            "Keyword arguments of `deszoo.make` (and of the env class); every value is checked "
            "when the env is built. The bounds keep each step within bounded time and memory; "
            "a value outside them is a `ConfigError` that names the parameter and its bound.",
            "",
            "| name | default | accepted | meaning |", "|---|---|---|---|"]
    every = cls.all_params()  # the scenario's own parameters first, then the bridge's
    for key in [*cls.params, *(k for k in every if k not in cls.params)]:
        param = every[key]
        out.append(f"| `{key}` | {_value(param.default)} | {param.expects} | {param.doc} |")
    out += ["", "Besides: `preset` (below), `render_mode` (one of "
            f"{', '.join(f'`{m}`' for m in cls.metadata['render_modes'])}), `mask_in_obs` "
            "(observations as `{\"observation\", \"action_mask\"}`), `max_cycles` "
            "(PettingZoo's name for `max_steps`).", "", "## Presets", ""]
    out += [_md(p) + "\n" for p in _paragraphs(presets_text)]
    out += ["| preset | differs from the defaults in |", "|---|---|"]
    for preset, values in cls.presets.items():
        diff = ", ".join(f"`{k}={v!r}`" for k, v in values.items()) or "nothing"
        out.append(f"| `{preset}` | {diff} |")
    img_dir = ROOT / "docs" / "img"
    frame, episode = img_dir / f"{short}_frame.png", img_dir / f"{short}_episode.png"
    if frame.exists() or episode.exists():
        out += ["", "## Pictures", "",
                f'`render_mode="rgb_array"` (left) and `deszoo run {name} --plot` (right); see '
                "[pictures.md](../pictures.md).", ""]
        for img in (frame, episode):
            if img.exists():
                out.append(f"![{img.stem}](../img/{img.name})")
        out.append("")
    out += ["", "## Version History", ""]
    for item in re.split(r"\n\s*(?=v\d+:)", history.strip()):
        if item.strip():
            out.append("- " + _md(" ".join(item.split())))
    return "\n".join(out).replace("\n\n\n", "\n\n").rstrip() + "\n"


def write_pages(check: bool = False) -> list[str]:
    """Write (or, with ``check``, compare) every scenario page; return the stale ones."""
    stale = []
    for name in latest_versions():  # one page each; older versions are in its history
        path = DOCS / f"{name.rsplit('_', 1)[0]}.md"
        text = scenario_page(name)
        if not path.exists() or path.read_text() != text:
            stale.append(str(path.relative_to(ROOT)))
            if not check:
                path.write_text(text)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/devkit/docs.py", description=__doc__)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a page is out of date")
    args = parser.parse_args(argv)
    stale = write_pages(check=args.check)
    if args.check and stale:
        print(f"out of date (run python benchmarks/devkit/docs.py): {', '.join(stale)}",
              file=sys.stderr)
        return 1
    for path in stale:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
