"""How deep and how large one stored attribute may be: JSON past these limits is no record
autotune wrote, and is refused by name before anything recurses into it.

Python's JSON reader, copy.deepcopy and every reader that walks a value recurse once per level:
an attribute nested 100,000 deep (a hand edit, a fuzzer) ended `best`, `export` and a resumed
`run` in a RecursionError. autotune's deepest attribute is three levels (a trial's GPUs: a list
of mappings; a raced trial's trail), so MAX_DEPTH leaves ample room. Its largest is the
answers of the accuracy pass (`predictions`, `item_scores`): a 10,000-item set of 1 KiB
answers is 10 MiB, so MAX_TEXT_CHARS is six times that. The text is checked before it is
parsed (autotune.study.store.database), the parsed value when a record is read or written
(autotune.records.stored), without recursion either way.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

MAX_DEPTH = 32
MAX_TEXT_CHARS = 64 * 2**20

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def text_problem(text: str) -> str | None:
    """What makes stored JSON `text` too large or too deep to read, or None."""
    if len(text) > MAX_TEXT_CHARS:
        return (
            f"{len(text) / 2**20:,.0f} MiB of JSON, past the {MAX_TEXT_CHARS // 2**20} MiB a "
            "stored attribute may hold"
        )
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    steps = (1 if char in "[{" else -1 for char in brackets)
    depth = max(itertools.accumulate(steps, initial=0))
    if depth > MAX_DEPTH:
        return f"nested {depth:,} levels deep, past the {MAX_DEPTH} a stored attribute may hold"
    return None


def value_problem(value: Any) -> str | None:
    """What makes a parsed attribute value too deep, or None: a walk level by level, without
    recursion, that stops past the limit."""
    level = [value]
    for depth in itertools.count(1):
        containers = [item for item in level if isinstance(item, dict | list | tuple)]
        if not containers:
            return None
        if depth > MAX_DEPTH:
            return (
                f"nested more than {MAX_DEPTH} levels deep, past what a stored attribute may hold"
            )
        level = [inner for c in containers for inner in (c.values() if isinstance(c, dict) else c)]
    return None  # unreachable: itertools.count never ends
