"""The README's first run, then `autotune verify`, on idle cores and beside CPU hogs.

    python bench/cpu/first_run_verify.py --out bench/results --name cpu-first-run-verify-DATE
    python bench/cpu/first_run_verify.py --repeats 1 --runs idle     # a shorter try

Each repeat runs, in a fresh folder and as a user types them, `autotune run --space smoke
--trials 6` and then `autotune verify` (which relaunches the recommended trial's `swift deploy`
command and measures it again); `busy` repeats run both beside `--hogs` CPU-bound processes
(`yes > /dev/null`, one per core by default). Recorded per repeat: the run's wall time and its
time split, the recommended trial, verify's exit status and verdict, the throughput recorded
and re-measured with the clock each side was timed on (issue 40: the recommendation's figure
must be the deployed command's, on idle and on busy cores). The check: every verify exits 0.
Writes NAME.json and NAME.md under --out; exit 1 when the check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from busy_cores import autotune, cpu_hogs  # a sibling script

TPS = "throughput_output_tokens_per_s"


def one_repeat(label: str, *, trials: int, hogs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"first-run-{label}-") as folder:
        workdir = Path(folder)
        with cpu_hogs(hogs):
            started = time.perf_counter()
            run = autotune("run", "--space", "smoke", "--trials", str(trials), cwd=workdir)
            run_s = time.perf_counter() - started
            started = time.perf_counter()
            verify = autotune("verify", "--json", cwd=workdir) if run.returncode == 0 else None
            verify_s = time.perf_counter() - started
    row: dict[str, Any] = {
        "label": label,
        "hogs": hogs,
        "run_exit": run.returncode,
        "run_s": round(run_s, 1),
        "time_line": next(
            (line for line in run.stderr.splitlines() if line.startswith("time: ")), None
        ),
        "trial_lines": [line for line in run.stderr.splitlines() if line.startswith("[")],
    }
    if verify is None:
        return row | {"verify_exit": None, "error": run.stderr[-2000:]}
    try:
        report = json.loads(verify.stdout)
    except json.JSONDecodeError:
        return row | {"verify_exit": verify.returncode, "error": verify.stderr[-2000:]}
    tps = next((c for c in report.get("checks", []) if c["metric"] == TPS), {})
    missed = [c["metric"] for c in report.get("checks", []) if c.get("passed") is False]
    return row | {
        "verify_exit": verify.returncode,
        "verify_s": round(verify_s, 1),
        "trial": report.get("trial"),
        "passed": report.get("passed"),
        "failure": report.get("failure"),
        "missed": missed,
        "recorded_clock": report.get("recorded_clock"),
        "measured_clock": report.get("measured_clock"),
        "recorded_tps": tps.get("recorded"),
        "measured_tps": tps.get("measured"),
        "band": [tps.get("low"), tps.get("high")],
        "recorded_interval": tps.get("recorded_interval"),
    }


def _figure(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, int | float) else "-"


def markdown(rows: list[dict[str, Any]], problems: list[str]) -> str:
    lines = [
        "# The first run and its verify, on idle and busy cores",
        "",
        f"`python bench/cpu/first_run_verify.py` on {os.cpu_count()} cores: `autotune run "
        "--space smoke --trials 6 && autotune verify` in a fresh folder per repeat; `busy` "
        "repeats run both beside CPU-bound `yes > /dev/null` processes.",
        "",
        "Check (every verify exits 0): "
        + ("**passed**" if not problems else "**failed**: " + "; ".join(problems)),
        "",
        "| repeat | hogs | run s | trial | recorded tok/s | verify tok/s | band | clock "
        "(recorded / verify) | verify exit | missed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        band = row.get("band") or [None, None]
        clocks = f"{row.get('recorded_clock')} / {row.get('measured_clock')}"
        lines.append(
            f"| {row['label']} | {row['hogs']} | {row['run_s']} | {row.get('trial')} "
            f"| {_figure(row.get('recorded_tps'))} | {_figure(row.get('measured_tps'))} "
            f"| [{_figure(band[0])}, {_figure(band[1])}] | {clocks} | {row.get('verify_exit')} "
            f"| {', '.join(row.get('missed') or []) or row.get('failure') or '-'} |"
        )
    lines.append("")
    for row in rows:
        lines += [f"## {row['label']}", "", "```", *row["trial_lines"], row["time_line"] or ""]
        lines += ["```", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--runs", default="idle,busy", help="idle, busy or both, in order")
    parser.add_argument("--out", type=Path, default=None, help="folder for NAME.json/.md")
    parser.add_argument("--name", default="cpu-first-run-verify")
    args = parser.parse_args(argv)
    rows = []
    for label in args.runs.split(","):
        hogs = args.hogs if label == "busy" else 0
        for repeat in range(1, args.repeats + 1):
            rows.append(one_repeat(f"{label}-{repeat}", trials=args.trials, hogs=hogs))
            row = rows[-1]
            print(
                f"{row['label']}: run {row['run_s']} s (exit {row['run_exit']}), verify exit "
                f"{row.get('verify_exit')}: {_figure(row.get('recorded_tps'))} recorded on the "
                f"{row.get('recorded_clock')}, {_figure(row.get('measured_tps'))} relaunched on "
                f"the {row.get('measured_clock')}",
                flush=True,
            )
    problems = [
        f"{row['label']}: verify exit {row.get('verify_exit')}"
        for row in rows
        if row.get("verify_exit") != 0
    ]
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        saved = {"rows": rows, "problems": problems, "argv": sys.argv[1:]}
        (args.out / f"{args.name}.json").write_text(json.dumps(saved, indent=2) + "\n")
        (args.out / f"{args.name}.md").write_text(markdown(rows, problems))
    print("check: " + ("passed" if not problems else "FAILED: " + "; ".join(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
