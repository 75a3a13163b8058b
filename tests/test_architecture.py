"""The architecture holds: packages import only downwards (import-linter's layers contract in
pyproject.toml), and the check itself catches an upward import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_package_imports_only_the_ones_below_it() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "1 kept, 0 broken" in result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(REPO / "autotune", tmp_path / "autotune")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    statistics = tmp_path / "autotune" / "measure" / "steady.py"
    # The statistics reaching up to the study loop: the kind of import that made the cycle.
    statistics.write_text(
        statistics.read_text(encoding="utf-8") + "\nfrom autotune.study import select  # noqa\n",
        encoding="utf-8",
    )
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout[-3000:]
    assert "BROKEN" in result.stdout
    assert "autotune.measure.steady -> autotune.study" in result.stdout
