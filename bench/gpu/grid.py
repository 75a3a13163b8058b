"""An exhaustive sweep of a small grid, with autotune's own engine reuse and measurement.

Each launch of the grid is started (autotune.engines.open_session: the exact command
`autotune export` prints) and every request-time point of the grid is measured on it with the
same plan a study trial uses (warm-up until the rate settles, then until the throughput's
interval is within the space's target). The sweep is the ground truth a study's
recommendation is compared with. `--repeat N` starts each launch N times afresh and measures
the points on each: the same configuration in fresh engines, which must agree within their
intervals.

    python bench/gpu/grid.py --space default --dummy-weights --out DIR \
        --launch '{"backend": "lmdeploy", "compile_mode": "default", "kv_cache_fraction": 0.3}' \
        --launch '{"backend": "lmdeploy", "compile_mode": "none", "kv_cache_fraction": 0.3}' \
        --request '{"batch_size": [1, 16, 64], "image_max_side": [null, 768]}' \
        [--repeat 1] [--deadline-s 480] [--name grid]

Results go to DIR/NAME.json after every point, so a time-out keeps what was measured.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from autotune.engines import measure_plan, open_session  # noqa: E402
from autotune.engines.measurement import to_measurement  # noqa: E402
from autotune.errors import AutotuneError, TrialFailure  # noqa: E402
from autotune.measure.steady import token_series  # noqa: E402
from autotune.params import SERVER_BACKENDS, TrialConfig  # noqa: E402
from autotune.records import SessionResult  # noqa: E402
from autotune.space import SearchSpace, load_space  # noqa: E402
from autotune.space.engine_defaults import baseline_config  # noqa: E402
from autotune.study import plan_study  # noqa: E402

SHOWN = (
    "throughput_output_tokens_per_s",
    "throughput_ci_rel",
    "load_warmup_s",
    "measured_window_s",
    "e2e_latency_p95_ms",
    "ttft_p50_ms",
    "tpot_p50_ms",
    "measured_requests",
    "peak_memory_mib",
)


def per_second(result: SessionResult) -> list[float]:
    series = token_series(result.timings, start=result.load_start, end=result.load_stop, bin_s=1.0)
    return [round(v, 1) for v in series]


def request_points(spec: dict[str, list[Any]]) -> list[dict[str, Any]]:
    names = list(spec)
    return [dict(zip(names, values, strict=True)) for values in itertools.product(*spec.values())]


def launch_config(space: SearchSpace, values: dict[str, Any]) -> TrialConfig:
    """The configuration a launch measures: the reference's with the launch's values, a server
    capped at the space's batch. A launch at the engine's defaults is the study's baseline
    (autotune.space.engine_defaults), which passes no flag, so it is compared like for like."""
    if values.get("engine_defaults"):
        baseline = baseline_config(space)
        if baseline is None or values.get("backend", baseline.backend) != baseline.backend:
            raise AutotuneError(
                f"space {space.name!r} measures no engine-defaults baseline for {values}: "
                "its deploy target must be a server backend the space measures"
            )
        return TrialConfig(**{**baseline.model_dump(), **values})
    values = dict(values)
    if values.get("backend", space.reference_config().backend) in SERVER_BACKENDS:
        values["max_batch_size"] = space.server_max_batch_size()
    return TrialConfig(**{**space.reference_config().model_dump(), **values})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--space", default="default")
    parser.add_argument("--model", default=None)
    parser.add_argument("--dummy-weights", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--launch", action="append", required=True, type=json.loads)
    parser.add_argument("--request", required=True, type=json.loads)
    parser.add_argument("--deadline-s", type=float, default=480)
    parser.add_argument("--repeat", type=int, default=1, help="fresh launches of each launch")
    parser.add_argument("--name", default="grid", help="results file stem in --out")
    parser.add_argument(
        "--min-launch-s", type=float, default=120, help="start no launch with less time left"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        # A plan needs a storage URL; the grid stores nothing in it (no study is created).
        plan = plan_study(
            load_space(args.space),
            model=args.model,
            study_name=args.name,
            storage_url=f"sqlite:///{args.out.resolve() / (args.name + '.db')}",
            dummy_weights=args.dummy_weights,
        )
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    space = plan.space
    points = request_points(args.request)
    rows: list[dict[str, Any]] = []
    data = {"space": space.name, "model": plan.model, "dummy_weights": args.dummy_weights,
            "launches": args.launch, "request": args.request, "repeat": args.repeat,
            "rows": rows}  # fmt: skip

    def save() -> None:
        path = args.out / f"{args.name}.json"
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")

    def log(message: str) -> None:
        print(f"[{time.monotonic() - started:6.1f} s] {message}", flush=True)

    try:  # every launch checked before the first starts
        configs = [launch_config(space, values) for values in args.launch]
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    repeats = range(1, args.repeat + 1)
    launches = [(i, v, n) for i, v in enumerate(args.launch) for n in repeats]
    for index, launch_values, number in launches:
        launch = configs[index]
        if args.deadline_s - (time.monotonic() - started) < args.min_launch_s:
            log(f"launch {launch_values} #{number}: skipped, too little time left")
            continue
        log(f"launch {launch_values} #{number}")
        try:
            session = open_session(
                space,
                launch,
                model_path=plan.model_path,
                evalset=plan.evalset,
                image_geometry=plan.image_geometry,
            )
        except TrialFailure as failure:
            log(f"launch failed: {failure.kind}: {failure.reason}\n{failure.log_tail}")
            rows.append(
                {"launch": launch_values, "launch_number": number, "status": failure.kind,
                 "error": failure.reason}
            )  # fmt: skip
            save()
            continue
        log(f"ready in {session.startup_s:.1f} s: launch {session.launch_id}")
        try:
            for point in points:
                left = args.deadline_s - (time.monotonic() - started)
                if left < 30:
                    log(f"{point}: skipped, {left:.0f} s left")
                    break
                config = TrialConfig(**{**launch.model_dump(), **point})
                measure = measure_plan(space, config, accuracy_ids=None, max_seconds=left - 20)
                row: dict[str, Any] = {"launch": launch_values, "launch_number": number, **point}
                row["config"] = config.model_dump(mode="json")  # what was launched, defaults filled
                point_started = time.monotonic()
                try:
                    result = session.measure(config, measure)
                except TrialFailure as failure:
                    row.update(status=failure.kind, error=failure.reason)
                    rows.append(row)
                    log(f"{point}: {failure.kind}: {failure.reason}")
                    save()
                    break  # the session is closed after a failure
                m = to_measurement(
                    space,
                    config,
                    result,
                    startup_s=session.startup_s,
                    evalset=plan.evalset,
                    measure_accuracy=False,
                )
                row.update(
                    status="ok",
                    figures=m.figures,
                    stop_reason=m.stop_reason,
                    time_s=m.time_s,
                    wall_s=time.monotonic() - point_started,
                    launch_id=session.launch_id,
                    command=m.environment.get("server_command", ""),
                    environment=m.environment,
                    # Tokens per second of the whole load, second by second: where the
                    # warm-up ended and how the rate swung, for the results page.
                    tokens_per_s_each_s=per_second(result),
                    # What the stop rule saw every 5 s (autotune.client.load.LoadRun.trail).
                    stop_rule_trail=result.stop_rule_trail,
                )
                rows.append(row)
                shown = ", ".join(f"{k} {m.figures.get(k, float('nan')):.4g}" for k in SHOWN)
                log(f"{point}: {shown} ({m.stop_reason})")
                save()
        finally:
            session.close()
    save()
    ok = [r for r in rows if r.get("status") == "ok"]
    if ok:
        best = max(ok, key=lambda r: r["figures"]["throughput_output_tokens_per_s"])
        point = {k: best[k] for k in args.request}
        figures = best["figures"]
        log(
            f"best of {len(ok)} points: {best['launch']} {json.dumps(point)} "
            f"{figures['throughput_output_tokens_per_s']:.1f} tok/s, "
            f"p95 {figures['e2e_latency_p95_ms']:.0f} ms"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
