"""Evaluation pools: sets too large to commit, built once from fixed seeds into studies/.

The sequential accuracy floor needs a thousand items or more to tell a drop of 0.02 from none
(`autotune evalset needs`). A pool (evalsets/pools.json) is a bundled set followed by more
items of the same kinds from the project's own generators (tools/make_pool.py). The first use
builds it into studies/evalsets/<name>/ (a few minutes, once) and checks its items against
the hash committed in pools.json; its images depend on the installed fonts and FreeType, so
their hash is kept beside them (build.json) and a study records the set's hash it judged on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from autotune.errors import EvalsetError

REPO_ROOT = Path(__file__).resolve().parents[2]
POOLS_FILE = REPO_ROOT / "evalsets" / "pools.json"
POOLS_DIR = REPO_ROOT / "studies" / "evalsets"
BUILD_FILE = "build.json"


def known_pools() -> dict[str, dict[str, object]]:
    try:
        return dict(json.loads(POOLS_FILE.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def _built(name: str, expected: object) -> bool:
    try:
        build = json.loads((POOLS_DIR / name / BUILD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(build, dict) and build.get("items_sha256") == expected


def ensure_pool(name: str) -> Path:
    """The pool's folder, built first if it is not yet (or no longer matches its hash)."""
    pools = known_pools()
    if name not in pools:
        raise EvalsetError(
            f"no evaluation pool named {name!r}; pools: {', '.join(pools) or 'none'}"
        )
    entry = pools[name]
    if _built(name, entry.get("items_sha256")):
        return POOLS_DIR / name
    if not (REPO_ROOT / "tools" / "make_pool.py").is_file():
        raise EvalsetError(
            f"evaluation pool {name!r} is not built and this installation has no tools/ to build "
            "it: run autotune from its git checkout, or pass --evalset with a set of your own"
        )
    print(
        f"building the evaluation pool {name} ({entry.get('items')} items, once) into "
        f"{POOLS_DIR} ...",
        file=sys.stderr,
        flush=True,
    )
    done = subprocess.run(
        [sys.executable, "-m", "tools.make_pool", name, "--out", str(POOLS_DIR)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["it failed without a word"])[-1]
        raise EvalsetError(f"building the evaluation pool {name} failed: {last}")
    return POOLS_DIR / name
