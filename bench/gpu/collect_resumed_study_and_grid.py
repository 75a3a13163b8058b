"""Merge a study resumed over two calls and the grid measured beside it into bench/results/.

    python bench/gpu/collect_resumed_study_and_grid.py --name h200-study-beside-grid-2026-11-30 \
        --run "RUN_LABEL:COMMIT:STUDY:DIR_A:DIR_B" [--run ...]

DIR_A holds the grid (grid.json) and the first part of the study; DIR_B the resumed study
(STUDY.db) and verify.json. For each run the page shows the study's trials and where its time
went, the grid, the recommendation against the grid's best, and the fresh relaunch (verify).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import optuna

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from autotune.study.results.select import recommend  # noqa: E402
from autotune.study.results.timeshare import study_time_share  # noqa: E402

TPS = "throughput_output_tokens_per_s"
P95 = "e2e_latency_p95_ms"


def _grid(path: Path) -> list[dict[str, Any]]:
    data = json.loads((path / "grid.json").read_text(encoding="utf-8"))
    return [
        {
            "graphs": row["launch"].get("compile_mode") != "none",
            "kv_cache_fraction": row["launch"].get("kv_cache_fraction"),
            "batch_size": row.get("batch_size"),
            "image_max_side": row.get("image_max_side"),
            "status": row.get("status"),
            "stop_reason": row.get("stop_reason"),
            **{
                k: (row.get("figures") or {}).get(k)
                for k in (TPS, "throughput_ci_rel", P95, "ttft_p50_ms", "measured_requests")
            },
            "startup_s": (row.get("figures") or {}).get("startup_s"),
        }
        for row in data["rows"]
    ]


def _trials(study: optuna.Study) -> list[dict[str, Any]]:
    rows = []
    for trial in study.get_trials(deepcopy=False):
        a = trial.user_attrs
        config = a.get("config") or {}
        rows.append(
            {
                "trial": trial.number,
                "state": trial.state.name,
                "label": "reference"
                if a.get("is_reference")
                else a.get("candidate") or ("repeat" if "duplicate_of" in a else ""),
                "backend": config.get("backend"),
                "graphs": config.get("compile_mode") != "none",
                "kv_cache_fraction": config.get("kv_cache_fraction"),
                "batch_size": config.get("batch_size"),
                "image_max_side": config.get("image_max_side"),
                "do_sample": config.get("do_sample"),
                TPS: a.get(TPS),
                "throughput_ci_rel": a.get("throughput_ci_rel"),
                P95: a.get(P95),
                "stop_reason": a.get("measure_stop_reason"),
                "launch_id": a.get("launch_id"),
                "launch_started": a.get("launch_started"),
                "time_s": a.get("time_s"),
                "deployable": a.get("deployable"),
            }
        )
    return rows


def collect_run(spec: str) -> dict[str, Any]:
    label, commit, study_name, dir_a, dir_b = spec.split(":")
    storage = f"sqlite:///{Path(dir_b) / (study_name + '.db')}"
    study = optuna.load_study(study_name=study_name, storage=storage)
    rec = recommend(study)
    grid = _grid(Path(dir_a))
    best = max((g for g in grid if g["status"] == "ok"), key=lambda g: g[TPS])
    verify = json.loads((Path(dir_b) / "verify.json").read_text(encoding="utf-8"))
    checks = {c["metric"]: c for c in verify["checks"]}
    rec_tps, rec_p95 = rec.trial.user_attrs[TPS], rec.trial.user_attrs[P95]
    relaunch = checks[TPS]["measured"]
    at_default = [  # verify's default tolerance is 25%: the same figures judged by it
        name
        for name, c in checks.items()
        if c["passed"] is not None
        and name != "peak_memory_mib"
        and c["recorded"]
        and (
            c["measured"] < c["recorded"] * 0.75
            if name == TPS
            else c["measured"] > c["recorded"] * 1.25
        )
    ]
    return {
        "label": label,
        "commit": commit,
        "study": study_name,
        "time": study_time_share(study).to_dict(),
        "trials": _trials(study),
        "grid": grid,
        "grid_best": best,
        "recommended": {
            "trial": rec.trial.number,
            "reason": rec.reason,
            "ties": [t.number for t in rec.ties],
            "config": rec.trial.user_attrs["config"],
            TPS: rec_tps,
            "throughput_ci_rel": rec.trial.user_attrs.get("throughput_ci_rel"),
            P95: rec_p95,
            "share_of_grid_best_throughput": rec_tps / best[TPS],
            "p95_not_worse_than_grid_best": rec_p95 <= best[P95],
        },
        "verify": {
            "command": verify["command"],
            "passed_at_5_percent": verify["passed"],
            "failed_checks_at_25_percent": at_default,
            "throughput_recorded": checks[TPS]["recorded"],
            "throughput_relaunch": relaunch,
            "throughput_change": relaunch / checks[TPS]["recorded"] - 1,
            "checks": verify["checks"],
        },
    }


def _f(value: Any, spec: str = ".1f") -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def markdown(runs: list[dict[str, Any]]) -> str:
    out: list[str] = []
    keys = ("compile_mode", "kv_cache_fraction", "batch_size", "image_max_side", "do_sample")
    for run in runs:
        t, r, v, b = run["time"], run["recommended"], run["verify"], run["grid_best"]
        shown = json.dumps({k: r["config"][k] for k in keys})
        out += [
            f"## {run['label']} (commit {run['commit']}, study `{run['study']}`)",
            "",
            f"- Trial time {t['total_s']:.0f} s in {t['trials']} trials on {t['launches']} "
            f"launches: start-up {t['startup_s']:.0f} s, warm-up {t['warmup_s']:.0f} s, "
            f"**measuring {t['measuring_s']:.0f} s ({t['measuring_share']:.0%})**, other "
            f"{t['other_s']:.0f} s.",
            f"- Recommended: trial {r['trial']} ({r['reason']}; ties: {r['ties'] or 'none'}): "
            f"{_f(r[TPS])} tok/s ±{_f(r['throughput_ci_rel'], '.1%')}, p95 {_f(r[P95], '.0f')} ms, "
            f"`{shown}`.",
            f"- Grid best: {'graphs' if b['graphs'] else 'eager'}, concurrency {b['batch_size']}, "
            f"image {b['image_max_side'] or 'full'}: {_f(b[TPS])} tok/s "
            f"±{_f(b['throughput_ci_rel'], '.1%')}, p95 {_f(b[P95], '.0f')} ms. "
            f"**Recommendation / grid best = {r['share_of_grid_best_throughput']:.1%}**, p95 "
            f"{'not worse' if r['p95_not_worse_than_grid_best'] else 'worse'}.",
            "- Fresh relaunch (`autotune verify --tolerance 0.05`): "
            f"{_f(v['throughput_relaunch'])} tok/s against "
            f"{_f(v['throughput_recorded'])} recorded, "
            f"**{v['throughput_change']:+.1%}**; passed at 5%: {v['passed_at_5_percent']}; "
            "checks failing at the default 25%: "
            f"{v['failed_checks_at_25_percent'] or 'none'}.",
            "",
            "| trial | label | launch | graphs | KV | conc. | image | sample | tok/s | ±CI "
            "| p95 ms | stop | start-up s | measuring s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in run["trials"]:
            ts = row["time_s"] or {}
            out.append(
                f"| {row['trial']} | {row['label']} | {row['launch_id'] or '-'}"
                f"{' (new)' if row['launch_started'] else ''} | {row['graphs']} | "
                f"{row['kv_cache_fraction']} | {row['batch_size']} | "
                f"{row['image_max_side'] or 'full'} | {row['do_sample']} | {_f(row[TPS])} | "
                f"{_f(row['throughput_ci_rel'], '.1%')} | {_f(row[P95], '.0f')} | "
                f"{row['stop_reason'] or '-'} | {_f(ts.get('startup'), '.0f')} | "
                f"{_f(ts.get('measuring'), '.0f')} |"
            )
        out += [
            "",
            "Grid (LMDeploy, KV 0.3, one launch per graphs setting, every point measured on it):",
            "",
            "| graphs | conc. | image | tok/s | ±CI | p95 ms | TTFT p50 ms | requests | stop |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for g in run["grid"]:
            out.append(
                f"| {g['graphs']} | {g['batch_size']} | {g['image_max_side'] or 'full'} | "
                f"{_f(g[TPS])} | {_f(g['throughput_ci_rel'], '.1%')} | {_f(g[P95], '.0f')} | "
                f"{_f(g['ttft_p50_ms'], '.0f')} | {_f(g['measured_requests'], '.0f')} | "
                f"{g['stop_reason']} |"
            )
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--run", action="append", required=True)
    args = parser.parse_args(argv)
    runs = [collect_run(spec) for spec in args.run]
    target = REPO / "bench" / "results"
    (target / f"{args.name}.json").write_text(json.dumps(runs, indent=2) + "\n")
    (target / f"{args.name}.tables.md").write_text(markdown(runs) + "\n")
    print(markdown(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
