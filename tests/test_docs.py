"""Every Python block of the README and of docs/*.md runs as written (the blocks of one page
run in order, in one namespace, as a reader would paste them), and the tutorial's code is
the example's."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "docs" / "envs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(page, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # blocks that write files write them here
    monkeypatch.syspath_prepend(str(ROOT))
    namespace: dict = {"__name__": "__docs__"}
    for k, code in enumerate(blocks(page)):
        try:
            exec(compile(code, f"{page.name} block {k + 1}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"{page.name}, Python block {k + 1} fails: {exc!r}") from exc
    for value in namespace.values():  # close what the blocks left open
        if isinstance(value, types.ModuleType):
            continue  # supersuit's module __getattr__ raises ImportError, not AttributeError
        close = getattr(value, "close", None)
        if callable(close) and type(value).__module__.startswith("deszoo"):
            close()


def test_the_tutorial_shows_the_example_and_counts_its_lines():
    example = (ROOT / "examples" / "custom_model.py").read_text().replace("  # noqa: E402", "")
    page = (ROOT / "docs" / "custom.md").read_text()
    shown = blocks(ROOT / "docs" / "custom.md")
    model = example[example.index("class Clinic:"):example.index("# ---- 2. the env")]
    assert model.strip() in shown[0]
    start = example.index("# ---- 2. the env")
    wrapper = example[example.index("\n", start) + 1:example.index("# ---- wrapper: end")]
    assert wrapper.strip() == shown[1].strip()
    lines = [s for s in wrapper.splitlines() if s.strip() and not s.strip().startswith("#")]
    claim = re.search(r"What you write: (\d+) lines", page)
    assert claim and int(claim.group(1)) == len(lines), (claim and claim.group(1), len(lines))


def test_scenario_pages_are_generated_from_the_code():
    """docs/envs/*.md are what ``python -m deszoo.docs`` writes (no drift)."""
    from deszoo.docs import write_pages

    assert write_pages(check=True) == [], "run python -m deszoo.docs"
