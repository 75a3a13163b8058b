"""Space files on disk: the built-in ones under search_spaces/, and loading any YAML path."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from autotune.errors import SpaceError, did_you_mean
from autotune.space.model import REPO_ROOT, SearchSpace, _first_error

BUILTIN_SPACES_DIR = REPO_ROOT / "search_spaces"


def builtin_spaces() -> list[str]:
    return sorted(path.stem for path in BUILTIN_SPACES_DIR.glob("*.yaml"))


def find_space_file(name_or_path: str) -> Path:
    """A space name (file under search_spaces/) or a path to a YAML file."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise SpaceError(f"space file '{name_or_path}' does not exist")
        return path
    builtin = BUILTIN_SPACES_DIR / f"{name_or_path}.yaml"
    if builtin.is_file():
        return builtin
    known = builtin_spaces()
    raise SpaceError(
        f"unknown space '{name_or_path}': {did_you_mean(name_or_path, known)}"
        f"built-in spaces: {', '.join(known)} "
        "(or give a path to a .yaml file)"
    )


def load_space(name_or_path: str) -> SearchSpace:
    """Load and validate a space; every problem is one SpaceError line naming file and field."""
    path = find_space_file(name_or_path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise SpaceError(f"{path}: malformed YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpaceError(f"{path}: cannot read the file: {exc}") from None
    if not isinstance(data, dict):
        raise SpaceError(f"{path}: a space file must be a YAML mapping of fields")
    data.setdefault("name", path.stem)
    try:
        space = SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(f"{path}: {_first_error(exc, top_level=True)}") from None
    space.source = path.resolve()
    return space
