"""A study's GPU figures from what `run.sh study`, `verify`, `sides` and `repeat` leave in $OUT.

    python3 bench/gpu/collect_study.py --study DIR/STUDY.db [--verify DIR/verify.json] \
        [--repeat DIR/repeat.json] [--grid DIR/grid.json] [--defaults DIR/defaults.json] \
        [--candidate lmdeploy-graphs] --json OUT.json --markdown OUT.md

- **Repeat:** one configuration in fresh launches: the study's `--candidate` trial when it was
  the first on its launch, and each launch of `repeat.json` (bench/gpu/grid.py --repeat). Each
  figure must lie within 3% of their mean, and each one's 95% interval must cover the others.
- **Study and verify:** the recommendation, where the study's time went, and whether a fresh
  relaunch (`autotune verify --tolerance 0.05`) passed and fell inside the recorded interval.
- **Grid:** the recommendation against the grid's best throughput at equal or better p95.
- **Baseline:** the study's trial of the deploy target at its own defaults against the same
  defaults launched fresh by `grid.py` (`--defaults`): each fresh figure must lie inside the
  trial's 95% interval, so the gain `best` prints stands on a figure that repeats.

A piece that was not run is reported as such; the script never fails for a missing file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import optuna

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from autotune.study.results.select import recommend  # noqa: E402
from autotune.study.results.timeshare import study_time_share  # noqa: E402
from autotune.study.store.storage import open_storage  # noqa: E402

TPS = "throughput_output_tokens_per_s"
CI = "throughput_ci_rel"
P95 = "e2e_latency_p95_ms"
SHOWN = (TPS, CI, P95, "ttft_p50_ms", "tpot_p50_ms", "load_warmup_s", "measured_window_s",
         "throughput_batches", "throughput_batch_s", "warmup_settled", "startup_s")  # fmt: skip


def _figures(figures: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {**extra, **{name: figures.get(name) for name in SHOWN}}


def _load(path: Path | None) -> dict[str, Any] | None:
    if path is None or not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def repeat_check(runs: list[dict[str, Any]], tolerance: float = 0.03) -> dict[str, Any]:
    """Each run within `tolerance` of the runs' mean, and each interval covering the others."""
    values = [r[TPS] for r in runs if isinstance(r.get(TPS), (int, float))]
    if len(values) < 2:
        return {"runs": runs, "passed": None, "why": "fewer than two fresh launches measured"}
    mean = statistics.fmean(values)
    for run in runs:
        value, rel = run[TPS], run.get(CI)
        run["off_mean"] = value / mean - 1
        run["within_tolerance"] = abs(value / mean - 1) <= tolerance
        others = [r[TPS] for r in runs if r is not run]
        run["covers_the_others"] = isinstance(rel, (int, float)) and all(
            value * (1 - rel) <= other <= value * (1 + rel) for other in others
        )
    passed = all(r["within_tolerance"] and r["covers_the_others"] for r in runs)
    return {"runs": runs, "mean": mean, "tolerance": tolerance, "passed": passed}


def _at_defaults(row: dict[str, Any]) -> bool:
    return bool(row.get("launch", {}).get("engine_defaults"))


def baseline_check(study: optuna.Study | None, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The study's baseline trial against fresh launches of the same defaults: each fresh
    figure inside the trial's 95% interval, the gain recomputed on their mean."""
    trials = study.get_trials(deepcopy=False) if study is not None else []
    trial = next(
        (
            t
            for t in trials
            if t.values and (t.user_attrs.get("config") or {}).get("engine_defaults")
        ),
        None,
    )
    fresh = [r["figures"] for r in rows if _at_defaults(r) and r.get("status") == "ok"]
    if trial is None or not fresh:
        why = "the study measured no baseline trial" if trial is None else "no fresh launch"
        return {"passed": None, "why": why}
    value, rel = trial.user_attrs[TPS], trial.user_attrs.get(CI)
    runs = [_figures(f) for f in fresh]
    for run in runs:
        run["inside"] = isinstance(rel, (int, float)) and (
            value * (1 - rel) <= run[TPS] <= value * (1 + rel)
        )
    check = {"trial": trial.number, TPS: value, CI: rel, "runs": runs}
    check["fresh_mean"] = statistics.fmean(run[TPS] for run in runs)
    check["passed"] = all(run["inside"] for run in runs)
    return check


def _study(path: Path) -> optuna.Study | None:
    if not path.is_file():
        return None
    storage = open_storage(f"sqlite:///{path}", create=False)
    names = optuna.get_all_study_names(storage)
    return optuna.load_study(study_name=names[0], storage=storage) if names else None


def _trials(study: optuna.Study) -> list[dict[str, Any]]:
    rows = []
    for trial in study.get_trials(deepcopy=False):
        a = trial.user_attrs
        config = a.get("config") or {}
        label = "reference" if a.get("is_reference") else a.get("candidate") or ""
        rows.append(
            _figures(
                a,
                trial=trial.number,
                state=trial.state.name,
                label=label,
                backend=config.get("backend"),
                batch_size=config.get("batch_size"),
                image_max_side=config.get("image_max_side"),
                do_sample=config.get("do_sample"),
                launch_id=a.get("launch_id"),
                launch_started=a.get("launch_started"),
                stop_reason=a.get("measure_stop_reason"),
                time_s=a.get("time_s"),
                failure=a.get("failure_reason"),
            )
        )
    return rows


def _grid_fresh_launches(
    rows: list[dict[str, Any]], config: dict[str, Any]
) -> list[dict[str, Any]]:
    """The grid's points of the candidate's very configuration that were the first measured
    on their launch: each one more fresh launch of it."""
    fresh, seen_launches = [], set()
    for row in rows:
        first_on_launch = row.get("launch_id") not in seen_launches
        seen_launches.add(row.get("launch_id"))
        same = all(config.get(k) == v for k, v in row["launch"].items()) and all(
            config.get(k) == row.get(k) for k in ("batch_size", "image_max_side")
        )
        if first_on_launch and same and row.get("status") == "ok":
            fresh.append(_figures(row["figures"], source=f"grid launch {row.get('launch_id')}"))
    return fresh


def collect(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {}
    fresh: list[dict[str, Any]] = []
    study = _study(args.study) if args.study else None
    if study is not None:
        rec = recommend(study)
        environment = rec.trial.user_attrs.get("environment") or {}
        result["study"] = {
            "name": study.study_name,
            "time": study_time_share(study).to_dict(),
            "trials": _trials(study),
            "recommended": _figures(
                rec.trial.user_attrs,
                trial=rec.trial.number,
                reason=rec.reason,
                ties=[t.number for t in rec.ties],
                config=rec.trial.user_attrs.get("config"),
            ),
            "environment": environment,
        }
        for trial in study.get_trials(deepcopy=False):
            a = trial.user_attrs
            if a.get("candidate") == args.candidate and a.get("launch_started") and TPS in a:
                fresh.append(_figures(a, source=f"study trial {trial.number} (fresh launch)"))
    verify = _load(args.verify)
    candidate_trials = {
        t.number
        for t in (study.get_trials(deepcopy=False) if study is not None else [])
        if t.user_attrs.get("candidate") == args.candidate
    }
    if verify is not None and verify.get("trial") in candidate_trials and not verify["failure"]:
        # verify relaunched the very configuration: one more fresh launch of it.
        check = {c["metric"]: c for c in verify["checks"]}[TPS]
        low, high = check.get("measured_interval") or (None, None)
        rel = (high - low) / (high + low) if low is not None else None
        fresh.append({**dict.fromkeys(SHOWN), TPS: check["measured"], CI: rel,
                      "source": "verify relaunch"})  # fmt: skip
    repeat = _load(args.repeat)
    if repeat is not None:
        for row in repeat["rows"]:
            if row.get("status") == "ok" and not _at_defaults(row):
                fresh.append(
                    _figures(row["figures"], source=f"repeat launch {row.get('launch_number')}")
                )
    grid = _load(args.grid)
    candidate_config = next(
        (
            t.user_attrs.get("config") or {}
            for t in (study.get_trials(deepcopy=False) if study is not None else [])
            if t.user_attrs.get("candidate") == args.candidate
        ),
        None,
    )
    if grid is not None and candidate_config:
        fresh += _grid_fresh_launches(grid["rows"], candidate_config)
    result["repeat"] = repeat_check(fresh)
    defaults = _load(args.defaults)
    if defaults is not None:
        result["baseline"] = baseline_check(study, defaults["rows"])
        recommended = result.get("study", {}).get("recommended", {}).get(TPS)
        if recommended and result["baseline"].get("passed") is not None:
            result["baseline"]["gain_on_fresh_mean"] = (
                recommended / result["baseline"]["fresh_mean"]
            )
    if verify is not None:
        checks = {c["metric"]: c for c in verify.get("checks", [])}
        tps = checks.get(TPS, {})
        result["verify"] = {
            "passed": verify.get("passed"),
            "failure": verify.get("failure"),
            "command": verify.get("command"),
            "recorded": tps.get("recorded"),
            "measured": tps.get("measured"),
            "change": (tps["measured"] / tps["recorded"] - 1)
            if tps.get("recorded") and tps.get("measured") is not None
            else None,
            "recorded_interval": tps.get("recorded_interval"),
            "measured_interval": tps.get("measured_interval"),
            "covered": tps.get("covered"),
            "checks": verify.get("checks"),
        }
    if grid is not None:
        ok = [row for row in grid["rows"] if row.get("status") == "ok"]
        best = max(ok, key=lambda row: row["figures"][TPS]) if ok else None
        result["grid"] = {"rows": grid["rows"], "best": best}
        if best is not None and "study" in result:
            rec_figures = result["study"]["recommended"]
            result["grid"]["recommendation_share_of_best"] = rec_figures[TPS] / best["figures"][TPS]
            result["grid"]["recommendation_p95_not_worse"] = (
                rec_figures[P95] <= best["figures"][P95]
            )
    return result


def _f(value: Any, spec: str = ".1f") -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def _row(*cells: Any) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def markdown(result: dict[str, Any], title: str) -> str:
    out = [f"# {title}", ""]
    repeat = result["repeat"]
    out += ["## One configuration, fresh launches", ""]
    if repeat.get("passed") is None:
        out += [f"Not run: {repeat.get('why')}.", ""]
    else:
        out += [
            f"Mean {_f(repeat['mean'])} tok/s; criterion: each within "
            f"{repeat['tolerance']:.0%} of the mean and each interval covering the others: "
            f"**{'passed' if repeat['passed'] else 'failed'}**.",
            "",
            "| launch | tok/s | ±95% | off mean | covers others | warm-up s | window s | "
            "batches × s | settled | p95 ms |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for run in repeat["runs"]:
            batches = f"{_f(run['throughput_batches'], '.0f')} × {_f(run['throughput_batch_s'])}"
            out.append(
                _row(
                    run["source"],
                    _f(run[TPS]),
                    _f(run[CI], ".1%"),
                    _f(run["off_mean"], "+.1%"),
                    run["covers_the_others"],
                    _f(run["load_warmup_s"], ".0f"),
                    _f(run["measured_window_s"], ".0f"),
                    batches,
                    run["warmup_settled"],
                    _f(run[P95], ".0f"),
                )
            )
        out.append("")
    study = result.get("study")
    if study is not None:
        t, r = study["time"], study["recommended"]
        out += [
            f"## The study `{study['name']}`",
            "",
            f"Trial time {t['total_s']:.0f} s in {t['trials']} trials on {t['launches']} "
            f"launches: start-up {t['startup_s']:.0f} s, warm-up {t['warmup_s']:.0f} s, "
            f"measuring {t['measuring_s']:.0f} s ({t['measuring_share']:.0%}).",
            "",
            f"Recommended: trial {r['trial']} ({r['reason']}; ties {r['ties'] or 'none'}): "
            f"{_f(r[TPS])} tok/s ±{_f(r[CI], '.1%')}, p95 {_f(r[P95], '.0f')} ms.",
            "",
            "| trial | label | backend | conc. | image | sample | tok/s | ±95% | p95 ms | "
            "warm-up s | window s | stop |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in study["trials"]:
            out.append(
                _row(
                    row["trial"],
                    row["label"],
                    row["backend"],
                    row["batch_size"],
                    row["image_max_side"] or "full",
                    row["do_sample"],
                    _f(row[TPS]),
                    _f(row[CI], ".1%"),
                    _f(row[P95], ".0f"),
                    _f(row["load_warmup_s"], ".0f"),
                    _f(row["measured_window_s"], ".0f"),
                    row["stop_reason"] or row["failure"] or row["state"],
                )
            )
        out.append("")
    verify = result.get("verify")
    if verify is not None:
        out += [
            "## Fresh relaunch of the recommendation (`autotune verify --tolerance 0.05`)",
            "",
            f"Passed: **{verify['passed']}**"
            f"{' (' + verify['failure'] + ')' if verify['failure'] else ''}; "
            f"throughput {_f(verify['recorded'])} recorded, {_f(verify['measured'])} measured "
            f"({_f(verify['change'], '+.1%')}); inside the recorded 95% interval: "
            f"{verify['covered']}.",
            "",
        ]
    out += _baseline_markdown(result.get("baseline"))
    grid = result.get("grid")
    if grid is not None and grid.get("best") is not None:
        best = grid["best"]
        out += [
            "## Grid (engines reused)",
            "",
            f"Best: {json.dumps(best['launch'])}, concurrency {best.get('batch_size')}, image "
            f"{best.get('image_max_side') or 'full'}: {_f(best['figures'][TPS])} tok/s, p95 "
            f"{_f(best['figures'][P95], '.0f')} ms. Recommendation / grid best: "
            f"{_f(grid.get('recommendation_share_of_best'), '.1%')}, p95 not worse: "
            f"{grid.get('recommendation_p95_not_worse')}.",
            "",
            "| launch | conc. | image | tok/s | ±95% | p95 ms | TTFT p50 ms | TPOT p50 ms | stop |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in grid["rows"]:
            figures = row.get("figures") or {}
            out.append(
                _row(
                    row.get("launch_id"),
                    row.get("batch_size"),
                    row.get("image_max_side") or "full",
                    _f(figures.get(TPS)),
                    _f(figures.get(CI), ".1%"),
                    _f(figures.get(P95), ".0f"),
                    _f(figures.get("ttft_p50_ms"), ".0f"),
                    _f(figures.get("tpot_p50_ms")),
                    row.get("stop_reason") or row.get("status"),
                )
            )
        out.append("")
    return "\n".join(out)


def _baseline_markdown(check: dict[str, Any] | None) -> list[str]:
    if check is None:
        return []
    out = ["## The engine's defaults: the study's baseline against fresh launches", ""]
    if check.get("passed") is None:
        return [*out, f"Not run: {check['why']}.", ""]
    out += [
        f"Baseline trial {check['trial']}: {_f(check[TPS])} tok/s ±{_f(check[CI], '.1%')}; "
        f"every fresh launch inside its interval: **{check['passed']}**; the recommendation "
        f"over the fresh launches' mean: {_f(check.get('gain_on_fresh_mean'), '.2f')}×.",
        "",
        "| fresh launch | tok/s | ±95% | inside | p95 ms |",
        "|---|---|---|---|---|",
    ]
    for number, run in enumerate(check["runs"], start=1):
        out.append(
            _row(number, _f(run[TPS]), _f(run[CI], ".1%"), run["inside"], _f(run[P95], ".0f"))
        )
    return [*out, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", type=Path)
    parser.add_argument("--verify", type=Path)
    parser.add_argument("--repeat", type=Path)
    parser.add_argument("--grid", type=Path)
    parser.add_argument("--defaults", type=Path, help="grid.py's JSON of engine-defaults launches")
    parser.add_argument("--candidate", default="lmdeploy-graphs")
    parser.add_argument("--title", default="A study's measurements, and whether they repeat")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--markdown", type=Path, required=True)
    args = parser.parse_args(argv)
    result = collect(args)
    args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    text = markdown(result, args.title)
    args.markdown.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
