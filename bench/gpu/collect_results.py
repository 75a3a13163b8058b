"""Merge what run_h200.sh brought back into bench/results/: one JSON and one markdown page.

    python bench/gpu/collect_results.py --bench OUT1/side_by_side.json [--bench OUT2/...] \
        --study-db OUT/h200-quick.db --study h200-quick --export OUT/export-lmdeploy.txt \
        --name h200-2026-11-30

Several side-by-side runs (e.g. rows that did not fit one call) merge by row name; a row that
ran (status ok) wins over one that was skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from side_by_side import Bench, Row, markdown_table  # noqa: E402

ORDER = (
    "hf-dynamic-b1",
    "hf-dynamic-b16",
    "hf-dynamic-b64",
    "hf-static-compile-b1",
    "hf-static-compile-b16",
    "lmdeploy-graphs-c1",
    "lmdeploy-graphs-c16",
    "lmdeploy-graphs-c64",
    "lmdeploy-graphs-c64-img768",
)
TRIAL_FIGURES = (
    "throughput_output_tokens_per_s",
    "throughput_requests_per_s",
    "e2e_latency_p95_ms",
    "ttft_p50_ms",
    "tpot_p50_ms",
    "peak_memory_mib",
    "startup_s",
    "compile_s",
    "measured_requests",
)


def merge_bench(paths: list[Path]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows: dict[str, dict[str, Any]] = {}
    metas = []
    for path in paths:
        data = json.loads(path.read_text(encoding="utf-8"))
        metas.append(data["meta"])
        for row in data["rows"]:
            if row["name"] not in rows or row["status"] == "ok":
                rows[row["name"]] = row
    ordered = sorted(
        rows.values(), key=lambda r: ORDER.index(r["name"]) if r["name"] in ORDER else 99
    )
    return ordered, metas


def study_summary(db: Path, name: str) -> dict[str, Any]:
    import optuna

    study = optuna.load_study(study_name=name, storage=f"sqlite:///{db}")
    from autotune.report.text import best_json

    trials = []
    for trial in study.trials:
        attrs = trial.user_attrs
        trials.append(
            {
                "number": trial.number,
                "state": trial.state.name,
                "reference": bool(attrs.get("is_reference")),
                "config": attrs.get("config"),
                "figures": {k: attrs.get(k) for k in TRIAL_FIGURES},
                "constraints": attrs.get("constraints"),
                "server_command": (attrs.get("environment") or {}).get("server_command"),
                "failure_reason": attrs.get("failure_reason"),
            }
        )
    return {
        "study": name,
        "attrs": {k: study.user_attrs.get(k) for k in ("dummy_weights", "notes", "model", "space")},
        "trials": trials,
        "best": best_json(study),
    }


def trials_table(study: dict[str, Any]) -> str:
    lines = [
        "| trial | backend | compile_mode | batch | image_max_side | kv fraction | tok/s | "
        "p95 e2e ms | TTFT p50 ms | TPOT p50 ms | peak MiB | start-up s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in study["trials"]:
        c, f = t["config"] or {}, t["figures"]
        ref = " (ref)" if t["reference"] else ""

        def num(key: str, spec: str, f: dict[str, Any] = f) -> str:
            value = f.get(key)
            return format(value, spec) if isinstance(value, (int, float)) else "—"

        lines.append(
            f"| {t['number']}{ref} | {c.get('backend')} | {c.get('compile_mode')} "
            f"| {c.get('batch_size')} | {c.get('image_max_side')} | {c.get('kv_cache_fraction')} "
            f"| {num('throughput_output_tokens_per_s', '.1f')} "
            f"| {num('e2e_latency_p95_ms', '.0f')} | {num('ttft_p50_ms', '.0f')} "
            f"| {num('tpot_p50_ms', '.1f')} | {num('peak_memory_mib', ',.0f')} "
            f"| {num('startup_s', '.1f')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", type=Path, action="append", default=[])
    parser.add_argument("--study-db", type=Path)
    parser.add_argument("--study", default="h200-quick")
    parser.add_argument("--export", type=Path, help="`autotune export` text output")
    parser.add_argument("--name", required=True, help="results file stem")
    parser.add_argument("--dest", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)

    rows, metas = merge_bench(args.bench)
    result: dict[str, Any] = {"side_by_side": {"runs": metas, "rows": rows}}
    bench = Bench.__new__(Bench)
    bench.rows = [Row(**row) for row in rows]
    parts = [markdown_table(bench)]
    if args.study_db:
        study = study_summary(args.study_db, args.study)
        result["study"] = study
        parts.append(trials_table(study))
    if args.export:
        result["export_lmdeploy"] = args.export.read_text(encoding="utf-8")
    args.dest.mkdir(parents=True, exist_ok=True)
    out = args.dest / f"{args.name}.json"
    out.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    print("\n\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
