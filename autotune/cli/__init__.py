"""The `autotune` command line: thin wrappers over library functions (`base`: the group and
its one-line errors; one module per kind of command)."""

from __future__ import annotations

from autotune.cli import evaluation, results, run  # noqa: F401  (each registers its commands)
from autotune.cli.base import main

__all__ = ["main"]
