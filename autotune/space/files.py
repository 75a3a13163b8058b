"""Space files on disk: the built-in ones under search_spaces/, and loading any YAML path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from autotune.errors import SpaceError, did_you_mean
from autotune.evalset.paths import not_a_regular_file
from autotune.space.model import NAME_PATTERN, NAME_RULE, REPO_ROOT, SearchSpace, _first_error
from autotune.space.settings import MAX_COUNT

BUILTIN_SPACES_DIR = REPO_ROOT / "search_spaces"
# The largest --enqueue file read: 20,000 candidates take 0.7-1 MB.
MAX_ENQUEUE_BYTES = 16 * 2**20
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def builtin_spaces() -> list[str]:
    return sorted(path.stem for path in BUILTIN_SPACES_DIR.glob("*.yaml"))


def find_space_file(name_or_path: str) -> Path:
    """A space name (file under search_spaces/) or a path to a YAML file."""
    if not name_or_path.strip():
        # Path("") is the current folder: say what is missing instead.
        raise SpaceError("no space given: name a built-in space or give a path to a .yaml file")
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists() or path.is_symlink():
        problem = not_a_regular_file(path)
        if problem:
            raise SpaceError(f"space file {name_or_path!r} {problem}")
        return path
    builtin = BUILTIN_SPACES_DIR / f"{name_or_path}.yaml"
    if builtin.is_file():
        return builtin
    known = builtin_spaces()
    raise SpaceError(
        f"unknown space {name_or_path!r}: {did_you_mean(name_or_path, known)}"
        f"built-in spaces: {', '.join(known)} "
        "(or give a path to a .yaml file)"
    )


def _read_yaml(path: Path) -> Any:
    """The YAML document in `path`; one SpaceError line for anything unreadable."""
    try:
        # libyaml's parser when it is there: ten times faster than PyYAML's own, which took
        # 20 s for an --enqueue file of 20,000 entries.
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        # A ReaderError (a NUL or another character YAML forbids) has a reason, no problem.
        problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or "not valid YAML"
        if "nesting depth" in str(problem):  # libyaml's own limit (PyYAML's is Python's)
            raise SpaceError(f"{path}: the YAML is too deeply nested to be a space file") from None
        raise SpaceError(f"{path}: malformed YAML{where}: {problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpaceError(f"{path}: cannot read the file: {exc}") from None
    except (RecursionError, MemoryError):
        raise SpaceError(f"{path}: the YAML is too deeply nested to be a space file") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise SpaceError(f"{path}: a value cannot be read: {exc}") from None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """One candidate, a JSON object, per line. Split on "\\n" only: U+0085, U+2028 and
    U+2029 are valid inside a JSON string, and str.splitlines would cut the line there."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpaceError(f"{path}: cannot read the file: {exc}") from None
    values = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise SpaceError(f"{path}, line {number}: not valid JSON ({exc})") from None
        if not isinstance(value, dict):
            raise SpaceError(
                f"{path}, line {number}: expected a JSON object with 'name' and 'config', got "
                f"{type(value).__name__}"
            )
        values.append(value)
    return values


def load_space(name_or_path: str) -> SearchSpace:
    """Load and validate a space; every problem is one SpaceError line naming file and field."""
    path = find_space_file(name_or_path)
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise SpaceError(f"{path}: a space file must be a YAML mapping of fields")
    if "name" not in data and not NAME_PATTERN.fullmatch(path.stem):
        raise SpaceError(
            f"{path}: the file name {path.stem!r} cannot name the study ({NAME_RULE}); "
            "add a name: field"
        )
    data.setdefault("name", path.stem)
    space = _validated(data, path, top_level=True)
    space.source = path.resolve()
    return space


def _validated(data: dict[str, Any], path: Path, *, top_level: bool = False) -> SearchSpace:
    """The space `data` describes; one SpaceError line naming `path` and the field."""
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(f"{path}: {_first_error(exc, top_level=top_level)}") from None
    except (RecursionError, MemoryError):
        raise SpaceError(f"{path}: a value is too deeply nested") from None


def with_enqueued(space: SearchSpace, candidates_file: str) -> SearchSpace:
    """`space` with the named configurations of `candidates_file` (--enqueue) measured right
    after the reference, before the space's own candidates.

    The file holds a list of {name, config} entries, or a mapping with such a `candidates:`
    list; each config is checked like a space's candidates (values, support, unique names).
    """
    path = Path(candidates_file).expanduser()
    problem = not_a_regular_file(path)
    if problem is not None:
        raise SpaceError(f"--enqueue {candidates_file}: the file {problem}")
    size = path.stat().st_size
    if size > MAX_ENQUEUE_BYTES:
        raise SpaceError(
            f"{path}: --enqueue file of {size / 2**20:.1f} MiB; it may hold at most "
            f"{MAX_ENQUEUE_BYTES // 2**20} MiB (about 300,000 candidates); split it"
        )
    data = _read_jsonl(path) if path.suffix == ".jsonl" else _read_yaml(path)
    if isinstance(data, dict) and set(data) == {"candidates"}:
        data = data["candidates"]
    if not isinstance(data, list) or not data:
        raise SpaceError(
            f"{path}: --enqueue takes a list of candidates, each '- name: ...' with a "
            "'config:' mapping (or a file with one 'candidates:' list, or JSON lines)"
        )
    if len(data) > MAX_COUNT:
        raise SpaceError(
            f"{path}: {len(data)} candidates; --enqueue takes at most {MAX_COUNT:,} (the most "
            "trials a study runs)"
        )
    values = space.model_dump()
    values["candidates"] = [*data, *values["candidates"]]
    enqueued = _validated(values, path)
    enqueued.source = space.source
    return enqueued
