"""Where the documentation lives, for messages that a user of the wheel reads.

A wheel has no ``docs/`` or ``benchmarks/`` folder, so messages name a page or folder of the
repository by its URL: ``doc("scores.md")``, ``repo("benchmarks/scores")``. ``REPOSITORY``
and ``DOCS`` are the ``Repository`` and ``Documentation`` URLs of ``[project.urls]`` in
``pyproject.toml`` (a test keeps them equal).
"""

from __future__ import annotations

__all__ = ["DOCS", "REPOSITORY", "doc", "repo"]

REPOSITORY = "https://github.com/deszoo/deszoo"
DOCS = f"{REPOSITORY}/tree/main/docs"


def repo(path: str) -> str:
    """The URL of ``path`` (a file or folder) in the repository's main branch."""
    return f"{REPOSITORY}/tree/main/{path}"


def doc(page: str) -> str:
    """The URL of ``docs/<page>`` (``page`` may carry an ``#anchor``)."""
    return f"{DOCS}/{page}"
