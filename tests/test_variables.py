"""The AUTOTUNE_* environment variables: one module declares and reads them all, by one rule
(autotune.variables), and the README's table is that module's."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest
from small_space import autotune_cli

from autotune import variables
from autotune.errors import VariableError
from autotune.study.store.recovery import heartbeat_grace_s
from autotune.study.store.storage_urls import sqlite_busy_timeout_s

REPO = Path(__file__).resolve().parents[1]
NAME = re.compile(r"\bAUTOTUNE_[A-Z][A-Z0-9_]*[A-Z0-9]\b")


DOCS = REPO / "docs" / "commands.md"  # the page the README sends readers to for variables


def test_the_documentation_lists_the_modules_table() -> None:
    assert variables.markdown_table() in DOCS.read_text(encoding="utf-8")


def _sources() -> list[Path]:
    return [
        *sorted((REPO / "autotune").rglob("*.py")),
        *sorted((REPO / "tools").rglob("*.py")),
        *sorted((REPO / "bench").rglob("*.py")),
    ]


def test_every_variable_the_code_and_docs_name_is_declared() -> None:
    named = set()
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *_sources()]:
        named |= set(NAME.findall(path.read_text(encoding="utf-8")))
    assert named - set(variables.VARIABLES) == set()
    assert set(variables.VARIABLES) - named == set()


def _constants(tree: ast.Module) -> dict[str, str]:
    """A module's NAME = "AUTOTUNE_..." constants."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def _environment_reads(path: Path, root: Path = REPO) -> list[str]:
    """The AUTOTUNE_* variables `path` reads from os.environ itself (get, pop, getenv, [])."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = _constants(tree)

    def named(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            value = node.value
        elif isinstance(node, ast.Name):
            value = constants.get(node.id, "")
        else:
            return None
        return value if value.startswith("AUTOTUNE_") else None

    # A pop whose value is dropped removes the variable (from a child's environment): no read.
    dropped = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            owner = ast.unparse(node.func.value)  # os.environ, not another process's environ()
            own = owner == "os.environ" and node.func.attr in ("get", "pop")
            if (own or ast.unparse(node.func) == "os.getenv") and id(node) not in dropped:
                reads.append(named(node.args[0]))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            reads.append(named(node.slice) if ast.unparse(node.value) == "os.environ" else None)
    return [f"{path.relative_to(root)}: {name}" for name in reads if name]


def test_no_module_but_the_declaration_reads_a_variable_from_the_environment() -> None:
    reads = [read for path in _sources() for read in _environment_reads(path)]
    assert reads == []


def test_a_read_of_the_environment_outside_is_found(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    source = 'import os\nX = "AUTOTUNE_HOST"\nx = os.environ.get(X)\ny = os.environ["AUTOTUNE_A"]\n'
    module.write_text(source)
    assert _environment_reads(module, root=tmp_path) == ["m.py: AUTOTUNE_HOST", "m.py: AUTOTUNE_A"]


# What each kind of variable refuses: a value of the wrong type, out of its range, not finite.
GARBAGE = {
    "AUTOTUNE_HEARTBEAT_GRACE_S": ["abc", "nan", "inf", "1e-9", "-5", "1", "2.5", "86401", "²"],
    "AUTOTUNE_SQLITE_BUSY_TIMEOUT_S": ["-1", "0", "soon", "nan", "-inf", "1e300", "0.05"],
    "AUTOTUNE_ENGINES_AT_ONCE": ["0", "-2", "two", "1.5", "99999"],
    "AUTOTUNE_NO_PLUGINS": ["2", "maybe", "on-ish"],
    "AUTOTUNE_PLUGIN_PROBE": ["x"],
    "AUTOTUNE_GUARD_PARENT": ["0", "-1", "abc", "9" * 12],
    "AUTOTUNE_HOST": ["a\tb", "x" * 256, "\x1b[31m"],
    "AUTOTUNE_FAKE_GPUS": ["65", "H200@", "H200@abc", "H200@-5", "@1980", ",", "a," * 70],
    "AUTOTUNE_DUMMY_DIR": ["/etc/hostname"],
    "AUTOTUNE_POOLS_DIR": ["/etc/hostname"],
    "AUTOTUNE_POOLS_FILE": ["a\x01b"],
    "AUTOTUNE_GROUP_TOKEN": ["XYZ", "a" * 65],
}
GOOD = {
    "AUTOTUNE_HEARTBEAT_GRACE_S": [("2", 2), (" 120 ", 120), ("86400", 86_400)],
    "AUTOTUNE_SQLITE_BUSY_TIMEOUT_S": [("0.1", 0.1), ("30", 30.0), ("1e3", 1000.0)],
    "AUTOTUNE_NO_PLUGINS": [("1", True), ("0", False), ("yes", True)],
    "AUTOTUNE_FAKE_GPUS": [("2", "2"), ("H200@1980,H100", "H200@1980,H100")],
    "AUTOTUNE_HOST": [("node-3", "node-3")],
}


def test_every_variable_is_in_garbage_so_each_kind_is_checked() -> None:
    assert set(GARBAGE) == set(variables.VARIABLES)


@pytest.mark.parametrize(
    ("name", "value"), [(name, value) for name, values in GARBAGE.items() for value in values]
)
def test_garbage_is_one_line_naming_the_variable_and_what_it_takes(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(VariableError) as caught:
        variables.read(name)
    message = str(caught.value)
    assert message.startswith(f"{name}={value[:60]!r} is refused (")
    assert variables.VARIABLES[name].takes in message and "or unset it" in message


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [(name, value, expected) for name, pairs in GOOD.items() for value, expected in pairs],
)
def test_a_good_value_is_taken_whole(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: object
) -> None:
    monkeypatch.setenv(name, value)
    assert variables.read(name) == expected


def test_unset_or_empty_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, variable in variables.VARIABLES.items():
        monkeypatch.delenv(name, raising=False)
        assert variables.read(name) == variable.default
        monkeypatch.setenv(name, "  ")
        assert variables.read(name) == variable.default
    assert heartbeat_grace_s() == 120 and sqlite_busy_timeout_s() == 30.0


def test_nothing_is_clamped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The readers that clamped (a busy timeout of -1 became 0.1 s, a grace of 1 became 2)
    now refuse."""
    monkeypatch.setenv("AUTOTUNE_SQLITE_BUSY_TIMEOUT_S", "-1")
    with pytest.raises(VariableError):
        sqlite_busy_timeout_s()
    monkeypatch.setenv("AUTOTUNE_HEARTBEAT_GRACE_S", "1")
    with pytest.raises(VariableError):
        heartbeat_grace_s()


CLI_CASES = [
    ("AUTOTUNE_HEARTBEAT_GRACE_S", "abc"),
    ("AUTOTUNE_HEARTBEAT_GRACE_S", "nan"),
    ("AUTOTUNE_HEARTBEAT_GRACE_S", "inf"),
    ("AUTOTUNE_HEARTBEAT_GRACE_S", "1e-9"),
    ("AUTOTUNE_HEARTBEAT_GRACE_S", "-5"),
    ("AUTOTUNE_SQLITE_BUSY_TIMEOUT_S", "-1"),
    ("AUTOTUNE_DUMMY_DIR", "/etc/hostname"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "value"), CLI_CASES)
def test_the_command_line_refuses_before_it_writes(tmp_path: Path, name: str, value: str) -> None:
    env = {**os.environ, name: value}
    done = autotune_cli("run", "--space", "smoke", "--trials", "1", cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith(f"error: {name}={value!r} is refused ("), lines[0]
    assert list(tmp_path.iterdir()) == [], "something was written"


@pytest.mark.slow
def test_help_still_works_with_a_bad_variable(tmp_path: Path) -> None:
    env = {**os.environ, "AUTOTUNE_HEARTBEAT_GRACE_S": "abc"}
    done = autotune_cli("--help", cwd=tmp_path, env=env)
    assert done.returncode == 0 and "Usage" in done.stdout, done.stderr
