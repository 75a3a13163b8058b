"""How far one configuration's throughput moves between fresh launches, from a repeated grid.

    python bench/gpu/grid.py --space smoke --out DIR --name cpu-launch-spread --repeat 4 \
        --launch '{"backend": "transformers", "attn_implementation": "sdpa"}' \
        --request '{"batch_size": [1, 2, 8], "image_max_side": [null, 64]}'
    python bench/cpu/launch_spread.py DIR/cpu-launch-spread.json --markdown OUT.md --json OUT.json

For every grid point measured on several fresh launches: the mean, the relative standard
deviation between launches (what `workload.launch_spread_rel` stands for), and whether each
launch's recorded 95% interval covered every other launch's figure (the repeat criterion).
The space's launch_spread_rel should be at least the largest spread seen on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from autotune.measure.summary import with_launch_spread  # noqa: E402

TPS = "throughput_output_tokens_per_s"


def covers(figures: list[float], half_widths: list[float]) -> bool:
    """Whether each figure's interval (its relative half-width) holds every other figure."""
    return all(
        abs(other - figure) <= half * figure
        for figure, half in zip(figures, half_widths, strict=True)
        for other in figures
    )


def spread_by_point(
    rows: list[dict[str, Any]], names: list[str], *, launch_spread_rel: float = 0.0
) -> list[dict[str, Any]]:
    """One entry per grid point that ran on two or more launches; `launch_spread_rel`: the
    spread to fold into each launch's own interval (as a study records it) for the last check."""
    points: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        if row.get("status") != "ok":
            continue
        point = {name: row.get(name) for name in names}
        key = json.dumps([row["launch"], point], sort_keys=True)
        points.setdefault(key, []).append(row)
    result = []
    for key, runs in points.items():
        launch, point = json.loads(key)
        if len(runs) < 2:
            continue
        figures = [float(r["figures"][TPS]) for r in runs]
        within = [float(r["figures"]["throughput_ci_within_rel"]) for r in runs]
        recorded = [float(r["figures"]["throughput_ci_rel"]) for r in runs]
        mean = statistics.fmean(figures)
        folded = [with_launch_spread(w, launch_spread_rel, 0.95) for w in within]

        result.append(
            {
                "launch": launch,
                "point": point,
                "launches": len(runs),
                "tokens_per_s": figures,
                "mean_tokens_per_s": mean,
                "sd_rel": statistics.stdev(figures) / mean,
                "max_deviation_rel": max(abs(f - mean) for f in figures) / mean,
                "ci_within_rel": within,
                "ci_recorded_rel": recorded,
                "within_intervals_cover_each_other": covers(figures, within),
                "recorded_intervals_cover_each_other": covers(figures, recorded),
                "launch_spread_rel": launch_spread_rel,
                "ci_with_spread_rel": folded,
                "with_spread_intervals_cover_each_other": covers(figures, folded),
            }
        )
    return result


def _words(values: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items()) or "(defaults)"


def markdown(points: list[dict[str, Any]], grid: dict[str, Any]) -> str:
    lines = [
        f"# Launch-to-launch spread: space {grid['space']}, {grid['repeat']} fresh launches",
        "",
        "| launch | point | tok/s each launch | mean | SD | max dev | 95% within (each) "
        "| within intervals cover | recorded cover | with the spread folded in, cover |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        each = ", ".join(f"{v:.1f}" for v in p["tokens_per_s"])
        within = ", ".join(f"±{v:.1%}" for v in p["ci_within_rel"])
        lines.append(
            f"| {_words(p['launch'])} | {_words(p['point'])} | {each} "
            f"| {p['mean_tokens_per_s']:.1f} | {p['sd_rel']:.1%} | {p['max_deviation_rel']:.1%} "
            f"| {within} | {'yes' if p['within_intervals_cover_each_other'] else 'no'} "
            f"| {'yes' if p['recorded_intervals_cover_each_other'] else 'no'} "
            f"| {'yes' if p['with_spread_intervals_cover_each_other'] else 'no'} |"
        )
    worst = max((p["sd_rel"] for p in points), default=float("nan"))
    spread = points[0]["launch_spread_rel"] if points else 0.0
    lines += [
        "",
        f"Largest spread between launches (SD): {worst:.1%}. The last column folds "
        f"launch_spread_rel {spread:g} into each launch's own 95% interval, as a study records it "
        "(autotune.measure.summary.with_launch_spread).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grid", type=Path, help="the JSON bench/gpu/grid.py --repeat wrote")
    parser.add_argument("--launch-spread-rel", type=float, default=0.0)
    parser.add_argument("--markdown", type=Path, required=True)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    grid = json.loads(args.grid.read_text(encoding="utf-8"))
    names = list(grid["request"])  # the grid's request-time parameters: one point each
    points = spread_by_point(grid["rows"], names, launch_spread_rel=args.launch_spread_rel)
    args.json.write_text(json.dumps({"grid": grid, "points": points}, indent=1), encoding="utf-8")
    args.markdown.write_text(markdown(points, grid), encoding="utf-8")
    print(markdown(points, grid))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
