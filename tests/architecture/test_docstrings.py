"""Docstrings state a rule and its reason, in a few lines (issue 55): none in the package runs
over 20 lines, names a file of bench/results/, or quotes what was measured on a card. Measured
figures go stale with the next engine release; they live in bench/results/, which docs/ pages
link."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_LINES = 20
CARD = re.compile(r"(?<!\w)(?:[AHLB]\d{2,3}S?|RTX ?\d{4}|MI\d{3}X?)(?!\d)")
# Examples of what a card is called ('NVIDIA H200, 1980 MHz') are quoted; they are no figure.
QUOTED = re.compile(r"`[^`]*`|(?<!\w)'[^'\n]*'(?!\w)|\"[^\"\n]*\"")
SENTENCE_END = re.compile(r"(?<=[.;])\s+")


def docstrings(path: Path) -> Iterator[tuple[str, int, str]]:
    """(name, line, docstring) of the module and each class and function in it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):  # the module first
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node, clean=False)
            if text:
                name = getattr(node, "name", "<module>")
                yield name, getattr(node, "lineno", 1), text


def card_figures(text: str) -> list[str]:
    """The sentences of `text` that name a card and quote a number measured on it."""
    found = []
    for sentence in SENTENCE_END.split(" ".join(text.split())):
        plain = QUOTED.sub("", sentence)
        if CARD.search(plain) and re.search(r"\d", CARD.sub("", plain)):
            found.append(sentence)
    return found


def problems(text: str) -> list[str]:
    found = []
    lines = len(text.strip().splitlines())
    if lines > MAX_LINES:
        found.append(f"{lines} lines")
    if "bench/results" in text:
        found.append("names bench/results/")
    found += [f"a card's figure: {s[:80]}" for s in card_figures(text)]
    return found


def test_every_docstring_states_a_rule_in_a_few_lines() -> None:
    found = {
        f"{path.relative_to(REPO)}:{line} {name}": why
        for path in sorted((REPO / "autotune").rglob("*.py"))
        for name, line, text in docstrings(path)
        if (why := problems(text))
    }
    assert not found, found


def test_a_lab_notebook_docstring_is_found() -> None:
    long = "\n".join(f"line {n}" for n in range(21))
    assert problems(long) == ["21 lines"]
    assert problems("Kept under 20 lines (bench/results/replay-2026-12-03.md).")
    notebook = "A rule. On the H200 the second candidate took 100-200 s; so it waits."
    figure = "On the H200 the second candidate took 100-200 s;"
    assert problems(notebook) == [f"a card's figure: {figure}"]
    # Naming a card, or quoting what one is called, is no measured figure.
    assert not problems("An H200's tokens per second say nothing of a rank on an H100.")
    assert not problems("'GPU 0,1 (NVIDIA H200, 1980 MHz)' for a trial's recorded GPUs.")
