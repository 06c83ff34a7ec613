"""Every Python block of the README and of docs/*.md runs as written (the blocks of one page
run in order, in one namespace, as a reader would paste them), and the tutorial's code is
the example's.

A ```python block runs; a ```py block is shown but only compiled: code that needs what a
test cannot have (a Ray cluster in docs/distributed.md). Pages that start Ray run in a
fresh interpreter with a private local Ray (``RAY_ADDRESS=local``), so they neither join a
cluster that happens to run on the machine nor leave Ray started in the test process.

A page whose block needs an optional package that is not installed (an extra such as
``.[sb3]``, or torch) is skipped with the package and how to install it, so that the
README's ``pip install -e ".[dev]"`` then ``pytest`` passes; CI runs those pages again with
every extra installed (``.ci/run``).
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "docs" / "envs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SHOWN = re.compile(r"^```py\n(.*?)^```", re.S | re.M)
OWN_PROCESS = {"distributed.md"}  # pages run in a fresh interpreter (they start Ray)
# How to get each optional package a page may need (the top-level module names).
INSTALL = {
    "torch": "pip install torch==2.13.0 (a CPU build)",
    "stable_baselines3": "pip install -e '.[sb3]'",
    "sb3_contrib": "pip install -e '.[sb3]'",
    "ray": "pip install -e '.[ray]'",
    "torchrl": "pip install -e '.[clients]'",
    "tensordict": "pip install -e '.[clients]'",
    "matplotlib": "pip install -e '.[render]'",
}
MISSING = "MISSING-OPTIONAL-PACKAGE "  # how the fresh interpreter reports one
RUNNER = textwrap.dedent(
    """
    namespace = {"__name__": "__docs__"}
    for k, code in enumerate(BLOCKS):
        try:
            exec(compile(code, f"{PAGE} block {k + 1}", "exec"), namespace)
        except Exception as exc:
            if missing_package(exc):
                sys.exit(f"{MISSING}{missing_package(exc)} {k + 1}")
            sys.exit(f"{PAGE}, Python block {k + 1} fails: {exc!r}")
    for value in list(namespace.values()):
        close = getattr(value, "close", None)
        if callable(close) and type(value).__module__.startswith("deszoo"):
            close()
    """
)


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


def missing_package(exc: BaseException | None) -> str | None:
    """The optional package whose absence raised ``exc`` (or caused it), if any.

    Only a package that is really not installed counts: an import that fails for another
    reason (a bug in a page, a broken install) is a failure, not a skip.
    """
    while exc is not None:
        name = getattr(exc, "name", None)
        if isinstance(exc, ModuleNotFoundError) and name:
            top = name.partition(".")[0]
            if importlib.util.find_spec(top) is None:
                return top
        exc = exc.__cause__ or exc.__context__
    return None


def skip_for(page: str, block: int, package: str) -> None:
    how = INSTALL.get(package, f"pip install {package}")
    pytest.skip(f"{page} block {block} needs {package}, which is not installed ({how})")


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(page, monkeypatch, tmp_path):
    for k, code in enumerate(SHOWN.findall(page.read_text())):
        compile(code, f"{page.name} shown block {k + 1}", "exec")  # at least valid Python
    if page.name in OWN_PROCESS:
        script = (f"from __future__ import annotations\nimport importlib.util, sys\n"
                  f"{inspect.getsource(missing_package)}\nMISSING = {MISSING!r}\n"
                  f"PAGE = {page.name!r}\nBLOCKS = {blocks(page)!r}\n{RUNNER}")
        path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        env = dict(os.environ, RAY_ADDRESS="local", PYTHONPATH=path)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=300, cwd=tmp_path, env=env)
        last = out.stderr.strip().splitlines()[-1:] or [""]
        if out.returncode != 0 and last[0].startswith(MISSING):
            package, block = last[0][len(MISSING):].split()
            skip_for(page.name, int(block), package)
        assert out.returncode == 0, out.stderr[-4000:]
        return
    monkeypatch.chdir(tmp_path)  # blocks that write files write them here
    monkeypatch.syspath_prepend(str(ROOT))
    namespace: dict = {"__name__": "__docs__"}
    for k, code in enumerate(blocks(page)):
        try:
            exec(compile(code, f"{page.name} block {k + 1}", "exec"), namespace)
        except Exception as exc:
            package = missing_package(exc)
            if package is not None:
                skip_for(page.name, k + 1, package)
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
    """docs/envs/*.md are what ``python benchmarks/devkit/docs.py`` writes (no drift)."""
    from devkit.docs import write_pages

    assert write_pages(check=True) == [], "run python benchmarks/devkit/docs.py"
