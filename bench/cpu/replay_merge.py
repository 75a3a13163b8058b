"""Merge replay runs made in parts (seeds or methods in separate processes) into one result.

    python bench/cpu/replay_merge.py --out bench/results --name replay-DATE PART.json ...

Each PART.json is what `bench/cpu/replay.py --out DIR --name PART` wrote; the merged summary,
check and table are replay.py's own (summary, check, markdown), as if one process had run
every part. Exit 1 when a criterion fails and --check is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import replay


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--check", action="store_true", help="exit 1 when a criterion fails")
    args = parser.parse_args(argv)
    saved = [json.loads(part.read_text(encoding="utf-8")) for part in args.parts]
    runs = [run for part in saved for run in part["runs"]]
    grids = [grid for part in saved for grid in part["grids"]]
    budgets: dict[str, float] = {}
    for part in saved:
        budgets |= part["summary"]["method_budget_s"]
    budget_s = budgets.get("study", saved[0]["summary"]["budget_s"])
    result = replay.summary(runs, grids, budget_s, budgets)
    problems = replay.check(result)
    text = replay.markdown(result, problems)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    merged = {"summary": result, "problems": problems, "runs": runs, "grids": grids}
    (args.out / f"{args.name}.json").write_text(json.dumps(merged, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(text)
    return 1 if problems and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
