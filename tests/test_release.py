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


def test_scores_docs_outside_a_checkout_says_where_it_runs(tmp_path):
    run = subprocess.run([sys.executable, "-m", "deszoo.scores", "--docs"], cwd=tmp_path,
                         capture_output=True, text=True)
    assert run.returncode == 2, run.stderr
    assert "no folder 'benchmarks/scores' here" in run.stderr
    assert "checkout of the repository" in run.stderr and "Traceback" not in run.stderr
