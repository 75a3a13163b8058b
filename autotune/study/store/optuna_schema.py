"""Whether a database's tables are Optuna's, checked before a study writes into it.

A name is not enough: another program's database with a table called `trials` passed a check
of names, Optuna then added its other eleven tables and a study row beside it, and failed on
the first trial (issue 30). So each table with one of Optuna's names must also have Optuna's
columns. The names and columns come from Optuna's own schema, so a new Optuna is followed.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping


@functools.cache
def optuna_columns() -> dict[str, frozenset[str]]:
    """Optuna's tables (its RDB schema and the migration tool's bookkeeping) and columns."""
    from autotune.study.store.optuna_private import rdb_models as models

    columns = {
        name: frozenset(column.name for column in table.columns)
        for name, table in models.BaseModel.metadata.tables.items()
    }
    columns["alembic_version"] = frozenset({"version_num"})
    return columns


def not_optunas(tables: Mapping[str, Collection[str]]) -> list[str]:
    """The tables (name -> its columns) that Optuna did not make: another name, or one of
    Optuna's names without Optuna's columns. SQLite's own tables (sqlite_*) are left out."""
    expected = optuna_columns()
    found = []
    for name in sorted(tables):
        if name.startswith("sqlite_"):
            continue
        if name not in expected:
            found.append(name)
        elif not expected[name] <= set(tables[name]):
            found.append(f"{name} (not Optuna's columns)")
    return found


def describe(foreign: list[str]) -> str:
    """The first few foreign tables, for a one-line error."""
    return ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
