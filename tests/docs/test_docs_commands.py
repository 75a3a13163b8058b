"""Every command the README and the docs show is run by a test, or says why it cannot be.

The rule, checked here: each ```bash block in README.md and docs/*.md is preceded by an HTML
comment, either `<!-- run-by: tests/FILE.py::test_name ... -->` (one or more tests) or
`<!-- not-run: reason -->`. A named test must be defined in its file, and every command of the
block must appear in one of the named files (an `autotune` subcommand as its quoted name, any
other program by its name), so a marker cannot point at an unrelated test. Measured figures
live in bench/results/: every file the pages cite there must exist.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

BLOCK = re.compile(r"(?:<!--(?P<marker>[^\n]*?)-->[ \t]*\n)?```bash\n(?P<body>.*?)```", re.DOTALL)
RESULTS_FILE = re.compile(r"bench/results/[A-Za-z0-9_.-]+")
LINK = re.compile(r"\]\((?!https?:)([^)#]+)(?:#[^)]*)?\)")


def bash_blocks() -> list[tuple[str, str | None, str]]:
    """(page, marker text or None, block body) for every bash block."""
    found = []
    for page in PAGES:
        for match in BLOCK.finditer(page.read_text(encoding="utf-8")):
            marker = match["marker"].strip() if match["marker"] else None
            found.append((page.relative_to(REPO).as_posix(), marker, match["body"]))
    return found


def programs(body: str) -> list[str]:
    """How a test names what each line runs: an autotune subcommand quoted ('"run"'), any
    other program by its name ('mkdocs')."""
    names = []
    for line in body.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        names.append(f'"{words[1]}"' if words[0] == "autotune" else Path(words[0]).name)
    return names


def test_every_bash_block_says_which_test_runs_it_or_why_none_can() -> None:
    blocks = bash_blocks()
    assert len(blocks) >= 8, blocks  # the README's and the pages' blocks were found
    problems = []
    for page, marker, body in blocks:
        if marker is None or not re.match(r"(run-by|not-run):\s*\S", marker):
            problems.append(f"{page}: no run-by/not-run marker before:\n{body}")
            continue
        if marker.startswith("not-run"):
            continue
        files = set()
        for ref in marker.removeprefix("run-by:").split():
            path, _, name = ref.partition("::")
            source = REPO / path
            if not source.is_file():
                problems.append(f"{page}: {path} does not exist")
                continue
            defined = {
                node.name
                for node in ast.walk(ast.parse(source.read_text(encoding="utf-8")))
                if isinstance(node, ast.FunctionDef)
            }
            if name not in defined:
                problems.append(f"{page}: {path} defines no {name}")
            files.add(source.read_text(encoding="utf-8"))
        for program in programs(body):
            if not any(program in text for text in files):
                problems.append(f"{page}: no named test runs {program!r}")
    assert not problems, "\n".join(problems)


def test_every_cited_results_file_exists() -> None:
    cited = {
        (page.relative_to(REPO).as_posix(), path)
        for page in PAGES
        for path in RESULTS_FILE.findall(page.read_text(encoding="utf-8"))
    }
    assert cited
    missing = [f"{page}: {path}" for page, path in sorted(cited) if not (REPO / path).is_file()]
    assert not missing, missing


def test_the_readme_links_resolve() -> None:
    # The site checks links between pages; the README is not part of it.
    targets = LINK.findall((REPO / "README.md").read_text(encoding="utf-8"))
    assert "docs/index.md" in targets
    assert not [t for t in targets if not (REPO / t).is_file()]


def test_the_readme_setup_installs_what_ci_installs() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    extras = re.search(r"## Set-up.*?pip install -e '(\.\[[a-z,-]+\])'", readme, re.DOTALL)
    assert extras, "no pip install line under ## Set-up"
    assert f"pip install -q -e '{extras[1]}'" in ci
