"""The documentation site builds in strict mode: no broken link or anchor, no page left out.

mkdocs.yml turns each check into a warning and `--strict` makes a warning fail the build, so
a page missing from the nav, a link to a missing page or heading fails here and in CI.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    # The README's command, with the site written to a temporary folder.
    result = mkdocs_build(REPO / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "results" / "index.html").is_file()


@pytest.mark.slow
def test_a_page_left_out_or_a_broken_anchor_fails_the_build(tmp_path: Path) -> None:
    # A copy of the docs with one fault each: the checks are on, not merely configured.
    for fault in ("left-out page", "broken anchor"):
        docs = tmp_path / fault / "docs"
        shutil.copytree(REPO / "docs", docs)
        config = docs.parent / "mkdocs.yml"
        config.write_text((REPO / "mkdocs.yml").read_text(encoding="utf-8"), encoding="utf-8")
        if fault == "left-out page":
            (docs / "orphan.md").write_text("# Orphan\n", encoding="utf-8")
        else:
            with (docs / "index.md").open("a", encoding="utf-8") as page:
                page.write("\n[gone](results.md#no-such-heading)\n")
        result = mkdocs_build(config, docs.parent / "site")
        assert result.returncode != 0, fault
        assert "orphan.md" in result.stderr or "no-such-heading" in result.stderr, result.stderr
