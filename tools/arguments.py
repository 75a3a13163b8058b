"""Argument types shared by the tools: a model folder that is not there is refused by argparse
in one line (exit 2), not by a traceback from deep inside transformers."""

from __future__ import annotations

import argparse
from pathlib import Path


def model_folder(text: str) -> Path:
    """A folder holding a model's config.json."""
    path = Path(text)
    if "\0" in text or not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a folder (give a model's folder)")
    if not (path / "config.json").is_file():
        raise argparse.ArgumentTypeError(f"{text!r} holds no config.json: it is not a model folder")
    return path
