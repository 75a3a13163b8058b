"""The smoke study on idle cores and beside CPU hogs: same recommendation, intervals that hold.

    python bench/cpu/busy_cores.py --out bench/results --name cpu-busy-cores-DATE
    python bench/cpu/busy_cores.py --trials 4 --hogs 2 --runs idle,busy   # a shorter try

Runs `autotune run --space smoke` (the README's first study, as a user runs it) once on idle
cores and once with `--hogs` CPU-bound processes (`yes > /dev/null`, one per core by default)
beside it, each in a fresh folder, and records per run: the wall time, the trials with their
throughput and its recorded 95% interval, which the floor rejected and why, and the
recommended trial. The check: the same configuration recommended in both runs, and every
ranked (feasible, measured) trial's interval within `--max-interval` (issue 28: +-10%).
Writes NAME.json and NAME.md under --out; exit 1 when the check fails. Each trial's share of
its load test spent waiting for a core is in the table: the in-process engine's on-core clock
leaves that wait out of its figures (autotune.engines.inprocess.clock).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TPS = "throughput_output_tokens_per_s"


@contextmanager
def cpu_hogs(count: int):
    """`count` busy-looping processes for the duration of the block, stopped after it."""
    hogs = [
        subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, start_new_session=True)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def autotune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "autotune.cli", *args]
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)


def trial_rows(database: Path) -> list[dict[str, Any]]:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="smoke", storage=f"sqlite:///{database}")
    rows = []
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        config = attrs.get("config") or {}
        rows.append(
            {
                "number": trial.number,
                "state": trial.state.name,
                "candidate": attrs.get("candidate"),
                "duplicate_of": attrs.get("duplicate_of"),
                "batch_size": config.get("batch_size"),
                "image_max_side": config.get("image_max_side"),
                "attn_implementation": config.get("attn_implementation"),
                "do_sample": config.get("do_sample"),
                "accuracy": attrs.get("accuracy"),
                "feasible": all(v <= 0 for v in (attrs.get("constraints") or {}).values()),
                TPS: attrs.get(TPS),
                "throughput_ci_rel": attrs.get("throughput_ci_rel"),
                "measure_stop_reason": attrs.get("measure_stop_reason"),
                "torch_threads": (attrs.get("environment") or {}).get("torch_threads"),
                # How much of the load test the engine's thread waited for a core.
                "run_queue_wait_share": (attrs.get("environment") or {}).get(
                    "run_queue_wait_share"
                ),
            }
        )
    return rows


def one_run(label: str, *, trials: int, hogs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"busy-cores-{label}-") as folder:
        workdir = Path(folder)
        with cpu_hogs(hogs):
            started = time.perf_counter()
            run = autotune("run", "--space", "smoke", "--trials", str(trials), cwd=workdir)
            wall_s = time.perf_counter() - started
        if run.returncode != 0:
            raise SystemExit(f"{label}: autotune run failed:\n{run.stderr[-3000:]}")
        best = json.loads(autotune("best", "--json", cwd=workdir).stdout)
        rows = trial_rows(workdir / "studies" / "smoke.db")
    recommended = best.get("recommended") or {}
    return {
        "label": label,
        "hogs": hogs,
        "wall_s": round(wall_s, 1),
        "recommended_trial": recommended.get("trial"),
        "recommended_config": recommended.get("config"),
        "infeasible": best.get("infeasible"),
        "trials": rows,
    }


def ranked(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The trials the recommendation was chosen among: complete, feasible, measured, own run."""
    return [
        row
        for row in run["trials"]
        if row["state"] == "COMPLETE" and row["feasible"] and row["duplicate_of"] is None
    ]


def check(runs: list[dict[str, Any]], max_interval: float) -> list[str]:
    problems = []
    configs = {json.dumps(r["recommended_config"], sort_keys=True) for r in runs}
    if len(configs) > 1:
        problems.append(f"recommendations differ: {sorted(configs)}")
    for run in runs:
        for row in ranked(run):
            half = row["throughput_ci_rel"]
            if half is None or not math.isfinite(half) or half > max_interval:
                problems.append(
                    f"{run['label']}: trial {row['number']} interval +-{half} over {max_interval}"
                )
    return problems


def markdown(runs: list[dict[str, Any]], problems: list[str], max_interval: float) -> str:
    lines = [
        "# The smoke study on idle and busy cores",
        "",
        f"`python bench/cpu/busy_cores.py` on {os.cpu_count()} cores; `busy` runs beside "
        "CPU-bound `yes > /dev/null` processes. `feasible`: meets every constraint the "
        "recommendation is chosen under (accuracy floor, memory, deployable as measured); "
        "ranked trials: complete, feasible, measured on their own.",
        "",
        f"Check (same recommendation, every ranked interval within +-{max_interval:.0%}): "
        + ("**passed**" if not problems else "**failed**: " + "; ".join(problems)),
        "",
    ]
    for run in runs:
        lines += [
            f"## {run['label']} ({run['hogs']} hogs): {run['wall_s']} s, "
            f"recommended trial {run['recommended_trial']} {run['recommended_config']}",
            "",
            "| trial | candidate | batch | side | sampling | accuracy | feasible | tok/s | "
            "95% interval | stop | threads | waited for a core |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in run["trials"]:
            half = row["throughput_ci_rel"]
            interval = f"+-{half:.1%}" if isinstance(half, float) and math.isfinite(half) else "-"
            tps = row[TPS]
            lines.append(
                f"| {row['number']}{' (repeat)' if row['duplicate_of'] is not None else ''} "
                f"| {row['candidate'] or ''} | {row['batch_size']} | {row['image_max_side']} "
                f"| {row['do_sample']} | {row['accuracy']} | {row['feasible']} "
                f"| {f'{tps:.1f}' if isinstance(tps, float) else '-'} | {interval} "
                f"| {row['measure_stop_reason']} | {row['torch_threads']} "
                f"| {_share(row.get('run_queue_wait_share'))} |"
            )
        lines.append("")
    return "\n".join(lines)


def _share(value: str | None) -> str:
    return "-" if value is None else f"{float(value):.0%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--runs", default="idle,busy", help="idle, busy or both, in order")
    parser.add_argument("--max-interval", type=float, default=0.10)
    parser.add_argument("--out", type=Path, default=None, help="folder for NAME.json/.md")
    parser.add_argument("--name", default="cpu-busy-cores")
    parser.add_argument(
        "--render", type=Path, default=None, help="only write the Markdown of a saved NAME.json"
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        saved = json.loads(args.render.read_text())
        print(markdown(saved["runs"], saved["problems"], saved["max_interval"]))
        return 0
    runs = []
    for label in args.runs.split(","):
        hogs = args.hogs if label == "busy" else 0
        runs.append(one_run(label, trials=args.trials, hogs=hogs))
        print(f"{label}: {runs[-1]['wall_s']} s, recommended {runs[-1]['recommended_config']}")
    problems = check(runs, args.max_interval)
    text = markdown(runs, problems, args.max_interval)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        result = {"runs": runs, "problems": problems, "max_interval": args.max_interval}
        (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / f"{args.name}.md").write_text(text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
