"""What a wheel holds and says: no repository machinery, no message that needs the repository.

``.ci/run`` builds the wheel and runs the commands from a folder outside the repository;
these are the checks that need no build.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from deszoo import _links

ROOT = Path(__file__).resolve().parent.parent


def test_the_urls_of_messages_are_the_package_metadatas():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["urls"]["Documentation"] == _links.DOCS
    assert project["urls"]["Repository"] == _links.REPOSITORY
    assert project["license"] == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT")


@pytest.mark.parametrize("name", ["deszoo.validation", "deszoo.docs", "deszoo.vector.testing",
                                  "deszoo.vector.plain_envs", "deszoo.bench.sidebyside"])
def test_test_machinery_is_not_in_the_package(name):
    """It lives in benchmarks/devkit/ (and benchmarks/sidebyside.py) now."""
    assert importlib.util.find_spec(name) is None


def test_no_message_names_a_repository_file():
    """The help of ``scores`` and ``bench`` gives the pages' URLs, not repository paths."""
    out = subprocess.run([sys.executable, "-m", "deszoo.cli", "scores", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "deszoo.scores --docs" not in out and _links.doc("scores.md") in out
    out = subprocess.run([sys.executable, "-m", "deszoo.cli", "bench", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "docs/benchmarks.md" not in out.replace(_links.doc("benchmarks.md"), "")
    out = subprocess.run([sys.executable, "-m", "deszoo.cli", "profile", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert _links.doc("custom.md#speed") in out and "docs/" not in out.replace(_links.DOCS, "")


def test_scores_docs_outside_a_checkout_says_where_it_runs(tmp_path):
    run = subprocess.run([sys.executable, "-m", "deszoo.scores", "--docs"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 2, run.stderr
    assert "no folder 'benchmarks/scores' here" in run.stderr
    assert "checkout of the repository" in run.stderr and "Traceback" not in run.stderr


def test_readme_names_every_scenario_and_its_current_version():
    import re

    from deszoo import list_envs
    from deszoo.registry import latest_versions

    readme = (ROOT / "README.md").read_text()
    for name in list_envs():
        assert f"`{name}`" in readme, name
    current = readme[readme.index("at its current version:"):readme.index("and the older")]
    assert re.findall(r"`(\w+_v\d+)`", current) == latest_versions()


def test_snippets_and_examples_use_current_versions():
    """README's Python blocks and examples/*.py name only the newest version of a scenario."""
    import re

    from deszoo.registry import latest_versions

    readme = (ROOT / "README.md").read_text()
    code = "".join(re.findall(r"^```python\n(.*?)^```", readme, re.S | re.M))
    code += "".join(p.read_text() for p in sorted((ROOT / "examples").glob("*.py")))
    named = set(re.findall(r"\b([a-z]+_v\d+)\b", code)) - {"clinic_v0"}  # the example's own
    assert named and named <= set(latest_versions()), named - set(latest_versions())


def test_readme_and_bench_help_state_one_duration():
    out = subprocess.run([sys.executable, "-m", "deszoo.cli", "bench", "--help"],
                         capture_output=True, text=True, check=True).stdout
    readme = " ".join((ROOT / "README.md").read_text().split())
    claim = "under a minute on 2 cores, even busy ones (47 to 50 s on 2 shared AMD EPYC cores"
    assert claim in readme and claim in " ".join(out.split())
