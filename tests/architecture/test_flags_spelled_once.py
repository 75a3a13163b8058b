"""Each engine flag is spelled once in the package: in its engine's flag table (issue 41).

A built-in engine's module (autotune/backends/<name>.py) holds a `FlagTable`, FLAGS; its
renderer, its reserved flags and the inner-engine check read that table, so a flag renamed in
an engine's release is renamed in one line. A spelling is a string that is a whole flag (an
argv word such as "--max-batch-size") or a table entry (`Flag("max-batch-size", ...)`); prose
that mentions a flag (docstrings, notes, errors, descriptions) documents it and is not counted.
Two engines that share a spelling (LMDeploy's and vLLM's --dtype) have two flags, one each.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections import defaultdict
from pathlib import Path

import pytest

import autotune.backends
from autotune.backends import BACKENDS, FlagTable

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "autotune"
FLAG = re.compile(r"--[a-z][a-z0-9_-]+")

# autotune's own options, spelled by its command line like an engine flag they are not.
AUTOTUNE_OWN = {
    "--model": "autotune run/evaluate --model: the checkpoint every engine serves",
    "--host": "autotune export --host: the address the exported server binds",
    "--port": "autotune export --port: the port the exported server binds",
}
AUTOTUNE_CLI = "autotune/cli/"

# The layers above the backends build every engine command from the tables.
ABOVE_THE_TABLES = ("autotune/export/", "autotune/engines/", "autotune/engine_args.py")


def spellings(source: str) -> set[str]:
    """The flags `source` spells: whole-flag strings, and the entries of a flag table."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if FLAG.fullmatch(node.value):
                found.add(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            first = node.args[0] if node.args else None
            if node.func.id == "Flag" and isinstance(first, ast.Constant):
                found.add(f"--{first.value}")
    return found


def _modules() -> dict[str, set[str]]:
    """Module path (relative to the repository) -> the flags it spells."""
    return {
        path.relative_to(REPO).as_posix(): spellings(path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _tables() -> dict[str, FlagTable]:
    """Module path -> the flag table of each built-in engine module that has one."""
    tables = {}
    for info in pkgutil.iter_modules(autotune.backends.__path__):
        module = importlib.import_module(f"autotune.backends.{info.name}")
        table = getattr(module, "FLAGS", None)
        if isinstance(table, FlagTable):
            tables[Path(str(module.__file__)).relative_to(REPO).as_posix()] = table
    return tables


MODULES = _modules()
TABLES = _tables()


def test_each_engine_flag_is_spelled_in_its_engine_module_alone() -> None:
    homes: dict[str, set[str]] = defaultdict(set)
    for path, table in TABLES.items():
        for flag in table:
            homes[flag.option].add(path)
    elsewhere = {
        f"{flag} in {path}"
        for path, flags in MODULES.items()
        for flag in flags & set(homes)
        if path not in homes[flag] and not (flag in AUTOTUNE_OWN and path.startswith(AUTOTUNE_CLI))
    }
    assert not elsewhere, sorted(elsewhere)


def test_the_layers_above_the_tables_spell_no_flag() -> None:
    """A flag a renderer wrote itself would be neither in its engine's table nor reserved."""
    spelled = {
        path: sorted(flags)
        for path, flags in MODULES.items()
        if path.startswith(ABOVE_THE_TABLES) and flags
    }
    assert not spelled, spelled


@pytest.mark.parametrize("path", sorted(TABLES))
def test_each_table_is_what_its_engine_reads(path: str) -> None:
    table = TABLES[path]
    backend = BACKENDS[Path(path).stem]
    names = [flag.name for flag in table]
    assert len(names) == len(set(names)), names
    assert {flag.option for flag in table} == MODULES[path]  # the scan reads the real table
    assert backend.reserved_flags == table.reserved()
    assert backend.session_len_flag in names
    assert backend.session_len_flag not in backend.reserved_flags
    if backend.inner_engine is not None:
        assert backend.inner_engine.flag in {flag.option for flag in table}


def test_the_built_in_servers_each_have_a_table() -> None:
    engines = {Path(path).stem for path in TABLES}
    assert engines == {name for name, backend in BACKENDS.items() if backend.reserved_flags}
    assert engines >= {"lmdeploy", "swift", "vllm"}


def test_a_renderer_spelling_a_flag_again_is_caught() -> None:
    renderer = 'argv += ["--max-batch-size", str(cap)] + F.dtype("bfloat16")\n'
    table = 'max_batch_size = Flag("max-batch-size", "the max_batch_size parameter")\n'
    prose = '"""--max-batch-size caps the batch."""\nnote = "set --max-batch-size"\n'
    assert spellings(renderer) == {"--max-batch-size"}
    assert spellings(table) == {"--max-batch-size"}
    assert spellings(prose) == set()
