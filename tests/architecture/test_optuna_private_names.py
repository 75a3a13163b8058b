"""Optuna's private surface is reached from one module, autotune.study.store.optuna_private
(issue 55): no other module imports an Optuna private module, reads a private attribute of an
Optuna object, overrides a private method of an Optuna class or names one in a string (a
method patched by name). So an Optuna release that
renames one breaks one module, whose names tests/study/store/test_storage_optuna_pins.py pins.

Optuna's private names are read from the installed Optuna's own source (every `self._name` and
private method of its study, trial and storage packages), so a name it adds is covered too.

Not even optuna_private overrides one: no class of autotune defines a method whose name starts
with one underscore and is also a name on an Optuna class it derives from (found by walking
each imported class's MRO, so a subclass of a subclass counts too). Overriding a private
method is patching it: Optuna's storages are wrapped through their public interface."""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import optuna

import autotune

REPO = Path(__file__).resolve().parents[2]
THE_MODULE = "autotune/study/store/optuna_private.py"


@functools.cache
def optuna_private_names() -> frozenset[str]:
    root = Path(optuna.__file__).parent
    names: set[str] = set()
    for package in ("study", "trial", "storages"):
        for path in (root / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            names |= set(re.findall(r"self\.(_[a-z]\w*)", text))
            names |= set(re.findall(r"def (_[a-z]\w*)\(\s*self", text))
    return frozenset(names)


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_private_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "optuna" and any(p.startswith("_") for p in parts)


class _Finder(ast.NodeVisitor):
    """The places in one module that reach Optuna's private surface, as 'line: what'."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self.from_optuna: set[str] = {"optuna"}  # names bound to something of Optuna's
        self.optuna_classes: list[bool] = []  # per enclosing class: does it derive from Optuna?

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if _is_private_module(alias.name):
                self.found.append(f"{node.lineno}: import {alias.name}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module.split(".")[0] == "optuna":
            self.from_optuna |= {a.asname or a.name for a in node.names}
            if _is_private_module(module) or any(a.name.startswith("_") for a in node.names):
                self.found.append(f"{node.lineno}: from {module} import ...")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        derives = any(_root(base) in self.from_optuna for base in node.bases)
        self.optuna_classes.append(derives)
        for item in node.body:
            is_method = isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
            if derives and is_method and item.name in optuna_private_names():
                self.found.append(f"{item.lineno}: overrides {node.name}.{item.name}")
        self.generic_visit(node)
        self.optuna_classes.pop()

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = node.attr
        if name.startswith("_") and not name.startswith("__"):
            owner = _root(node.value)
            in_optuna_class = bool(self.optuna_classes) and self.optuna_classes[-1]
            own = owner in ("self", "cls") and not in_optuna_class
            if owner in self.from_optuna or (name in optuna_private_names() and not own):
                self.found.append(f"{node.lineno}: {ast.unparse(node)}")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        # A name in a string: a method patched by name (setattr, getattr).
        if isinstance(node.value, str) and node.value in optuna_private_names():
            self.found.append(f"{node.lineno}: {node.value!r}")


def private_uses(path: Path) -> list[str]:
    finder = _Finder()
    finder.visit(ast.parse(path.read_text(encoding="utf-8")))
    return finder.found


def test_only_one_module_reaches_optunas_private_names() -> None:
    found = {
        str(path.relative_to(REPO)): uses
        for path in sorted((REPO / "autotune").rglob("*.py"))
        if str(path.relative_to(REPO)) != THE_MODULE and (uses := private_uses(path))
    }
    assert not found, found
    assert private_uses(REPO / THE_MODULE), "the rule no longer sees the module it exempts"


def test_each_kind_of_private_use_is_found(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import optuna\n"
        "from optuna.storages._rdb import models\n"
        "class S(optuna.Study):\n"
        "    def _get_trials(self):\n"
        "        return self._storage\n"
        "class Own:\n"
        "    def f(self, trial):\n"
        "        return self._storage, trial._trial_id, optuna.storages._CachedStorage\n"
        "PATCHED = ('_create_new_trial',)\n",
        encoding="utf-8",
    )
    uses = private_uses(module)
    assert [u.split(":")[0] for u in uses] == ["2", "4", "5", "8", "8", "9"], uses
    assert "2: from optuna.storages._rdb import ..." in uses
    assert "4: overrides S._get_trials" in uses


def _autotune_classes() -> list[type]:
    """Every class defined in a module of autotune (each module imported)."""
    classes = []
    for info in pkgutil.walk_packages(autotune.__path__, "autotune."):
        if info.name.endswith("__main__"):
            continue  # runs the command line
        module = importlib.import_module(info.name)
        classes += [
            c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == info.name
        ]
    return classes


def private_overrides(cls: type) -> list[str]:
    """'Class._name' for each method `cls` itself defines whose name starts with one
    underscore and is also defined by an Optuna class in its MRO."""
    optunas = [base for base in cls.__mro__ if base.__module__.split(".")[0] == "optuna"]
    return [
        f"{cls.__qualname__}.{name}"
        for name, value in vars(cls).items()
        if name.startswith("_")
        and not name.startswith("__")
        and callable(value)
        and any(name in vars(base) for base in optunas)
    ]


def test_no_class_overrides_a_private_method_of_optuna() -> None:
    classes = _autotune_classes()
    found = [name for cls in classes for name in private_overrides(cls)]
    assert not found, found
    # The walk sees autotune's classes that derive from Optuna's (the storage wrappers).
    derived = {c.__name__ for c in classes if issubclass(c, optuna.storages.BaseStorage)}
    assert {"RetryingStorage", "GuardedJournalStorage", "SnapshotStorage"} <= derived, derived


def test_a_private_override_is_found_through_a_subclass() -> None:
    class View(optuna.Study):
        pass

    class Deeper(View):
        def _get_trials(self) -> list[object]:  # type: ignore[override]
            return []

        def _own(self) -> None:
            """A private name of its own: Optuna's classes have none of it."""

        def get_trials(self) -> list[object]:  # type: ignore[override]
            return []

    assert private_overrides(Deeper) == [f"{Deeper.__qualname__}._get_trials"]
    assert private_overrides(View) == []


def test_the_one_module_reads_private_names_but_overrides_none() -> None:
    uses = private_uses(REPO / THE_MODULE)
    assert not [use for use in uses if "overrides" in use], uses
