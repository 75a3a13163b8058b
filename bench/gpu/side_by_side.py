"""Side-by-side serving speed of Qwen3-VL-2B (dummy weights) with autotune's own measurement code.

Rows, in priority order (a hard deadline skips what does not fit, never cuts a table):

  (a) the reference: transformers, dynamic cache, batch 1, full 1920x1080 image
  (c) LMDeploy's PyTorch engine with CUDA graphs, `lmdeploy serve api_server` over HTTP,
      at concurrency 1, 16 and 64 on ONE server (started with --max-batch-size 64), plus
      concurrency 64 with images resized client-side to 768 px
  (b) transformers, static cache + torch.compile (reduce-overhead: CUDA graphs), batch 1
  (a) transformers, dynamic cache, batch 16
  (b) transformers, static cache + torch.compile, batch 16
  (a) transformers, dynamic cache, batch 64 (if time is left)

Transformers rows run through autotune.measure.measurement.measure (a worker process per row,
as a study trial). LMDeploy rows render the command with autotune.export, start it with the server
runner's ServerProcess and drive it with the same PassPlan / drive_passes a server trial uses;
the only difference from a trial is that one server serves every concurrency (a trial
restarts it per configuration, 50 s each). Start-up (load, CUDA-graph capture) and warm-up
(first requests, torch.compile) are reported separately from every latency figure.

    python bench/gpu/side_by_side.py --out DIR [--deadline-s 420] [--rows NAME ...] [--no-server]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_evalset import write_evalset  # noqa: E402

from autotune.checkpoints.dummy import dummy_checkpoint  # noqa: E402
from autotune.errors import TrialFailure  # noqa: E402
from autotune.evalset.dataset import load_evalset  # noqa: E402
from autotune.measure.measurement import measure  # noqa: E402
from autotune.measure.timing import RequestTiming, summarize  # noqa: E402
from autotune.params import TrialConfig  # noqa: E402
from autotune.space import SearchSpace, Workload  # noqa: E402

FIGURES = (
    "ttft_p50_ms",
    "tpot_p50_ms",
    "e2e_latency_p50_ms",
    "e2e_latency_p95_ms",
    "throughput_output_tokens_per_s",
    "throughput_requests_per_s",
    "measured_requests",
    "measured_output_tokens",
)


@dataclass
class Row:
    name: str
    engine: str
    batch: int
    image: str
    status: str = "skipped"
    figures: dict[str, float] = field(default_factory=dict)
    peak_memory_mib: float | None = None
    memory_source: str = ""
    startup_s: float | None = None
    warmup_s: float | None = None
    wall_s: float | None = None
    error: str = ""
    notes: str = ""


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.out: Path = args.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.rows: list[Row] = []
        self.meta: dict[str, Any] = {}

    def remaining(self) -> float:
        return self.args.deadline_s - (time.monotonic() - self.t0)

    def budget(self, cap: float, *, minimum: float) -> float | None:
        """Seconds this phase may take, or None when too little is left to start it."""
        left = self.remaining() - 10  # leave time to write the table
        return None if left < minimum else min(cap, left)

    def save(self) -> None:
        data = {"meta": self.meta, "rows": [row.__dict__ for row in self.rows]}
        (self.out / "side_by_side.json").write_text(json.dumps(data, indent=2) + "\n")

    def log(self, message: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f} s] {message}", flush=True)


def environment() -> dict[str, Any]:
    info: dict[str, Any] = {
        "date_utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "host_cpus": os.cpu_count(),
    }
    for name in ("torch", "transformers", "triton", "lmdeploy", "optuna", "xgrammar"):
        try:
            info[f"{name}_version"] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[f"{name}_version"] = "not installed"
    with contextlib.suppress(Exception):
        query = "--query-gpu=name,driver_version,memory.total,clocks.max.sm"
        line = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip()
        name, driver, memory, clock = (part.strip() for part in line.splitlines()[0].split(","))
        info.update(gpu_name=name, driver=driver, gpu_memory=memory, gpu_max_sm_clock=clock)
    with contextlib.suppress(Exception):
        import torch

        info["torch_cuda"] = torch.version.cuda
    return info


def base_space(args: argparse.Namespace, evalset: Path) -> SearchSpace:
    return SearchSpace(
        name="side-by-side",
        model=args.model,
        device=args.device,
        evalset=str(evalset),
        trials=1,
        reference={"dtype": args.dtype, "max_new_tokens": args.max_new_tokens},
    )


def with_workload(space: SearchSpace, batch: int, timeout_s: float) -> SearchSpace:
    # Whole rounds of `batch`: one warm-up round, then enough measured rounds for at least
    # `min_requests` requests (a static batch engine answers whole batches only).
    rounds = 2 if batch > 1 else 1
    warmup = batch
    requests = max(batch * rounds, 5 if batch == 1 else 4)
    workload = Workload(warmup_requests=warmup, requests=requests, startup_timeout_s=timeout_s)
    return space.model_copy(update={"workload": workload, "trial_timeout_s": timeout_s})


def record(row: Row, figures: dict[str, float], result: dict[str, Any]) -> None:
    row.figures = {name: figures[name] for name in FIGURES if name in figures}
    row.peak_memory_mib = result.get("peak_memory_mib")
    row.memory_source = result.get("memory_source", "")
    row.startup_s = result.get("startup_s")
    row.warmup_s = result.get("compile_s")


def run_transformers(bench: Bench, space: SearchSpace, ckpt: str, spec: dict[str, Any]) -> None:
    args = bench.args
    row = Row(spec["name"], "transformers", spec["batch"], "1920x1080")
    bench.rows.append(row)
    timeout = bench.budget(spec["cap"], minimum=spec["minimum"])
    if timeout is None:
        row.error = f"skipped: {bench.remaining():.0f} s left"
        bench.save()
        return
    config = TrialConfig(
        backend="transformers",
        dtype=args.dtype,
        compile_mode=spec["compile_mode"],
        batch_size=spec["batch"],
        max_new_tokens=args.max_new_tokens,
    )
    bench.log(f"{row.name}: up to {timeout:.0f} s")
    started = time.monotonic()
    try:
        m = measure(
            with_workload(space, spec["batch"], timeout),
            config,
            model_path=ckpt,
            evalset=load_evalset(space.evalset),
            measure_accuracy=False,
        )
        record(row, m.figures, m.figures | {"memory_source": m.memory_source})
        row.status = "ok"
        bench.meta.setdefault("transformers_environment", m.environment)
    except TrialFailure as failure:
        row.status = failure.kind
        row.error = failure.reason
        with (bench.out / "failures.log").open("a") as log:  # one file: $OUT returns few
            log.write(f"== {row.name}: {failure.kind}: {failure.reason}\n{failure.log_tail}\n")
    row.wall_s = time.monotonic() - started
    bench.log(f"{row.name}: {row.status} {row.error[:200]}")
    bench.save()


def run_server(bench: Bench, space: SearchSpace, ckpt: str) -> None:
    """One LMDeploy server (CUDA graphs), measured at several concurrencies over HTTP."""
    from autotune.client import PassPlan
    from autotune.engines.identity import check_engine
    from autotune.engines.memory import MemorySampler
    from autotune.engines.server import HOST, ServerProcess, chat_prompts, drive_passes, free_port
    from autotune.export import render_export

    args = bench.args
    loads = [(c, None) for c in args.concurrency] + [(max(args.concurrency), 768)]
    rows = [
        Row(
            f"{args.server_format}-graphs-c{c}" + (f"-img{side}" if side else ""),
            f"{args.server_format} (server)",
            c,
            f"{side} px side" if side else "1920x1080",
        )
        for c, side in loads
    ]
    bench.rows.extend(rows)
    timeout = bench.budget(args.server_cap_s, minimum=90)
    if timeout is None:
        for row in rows:
            row.error = f"skipped: {bench.remaining():.0f} s left"
        bench.save()
        return
    top = max(args.concurrency)
    config = TrialConfig(
        backend=args.server_format if args.server_format != "swift" else "transformers",
        dtype=args.dtype,
        # lmdeploy/vllm: CUDA graphs on (no --eager-mode / --enforce-eager)
        compile_mode="default" if args.server_format != "swift" else "none",
        batch_size=top,
        max_new_tokens=args.max_new_tokens,
    )
    port = free_port()
    export = render_export(
        config, fmt=args.server_format, model=ckpt, host=HOST, port=port, engine_args={}
    )
    bench.meta["server_command"] = export.command
    bench.meta["server_request_fields"] = export.request
    log_path = bench.out / "server.log"
    env = {**os.environ, **export.env, "PYTHONUNBUFFERED": "1"}
    if args.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    bench.log(f"server: {export.command} (up to {timeout:.0f} s in all)")
    deadline = time.monotonic() + timeout
    server = ServerProcess(export.argv, env=env, port=port, log_path=log_path).start()
    sampler = MemorySampler(server.pid, use_gpu=args.device != "cpu").start()
    evalset = load_evalset(space.evalset)
    try:
        ready = server.wait_ready(timeout)
        engine = check_engine(export.format, export.argv, server.log_text())
        bench.meta["server_engine"] = {"requested": engine.requested, "actual": engine.actual}
        bench.log(f"server ready in {ready.startup_s:.1f} s ({engine.actual})")
        for row, (concurrency, side) in zip(rows, loads, strict=True):
            left = deadline - time.monotonic()
            if left < 15:
                row.error = f"skipped: {left:.0f} s left"
                continue
            cfg = config.model_copy(update={"batch_size": concurrency, "image_max_side": side})
            fields = dict(export.request)
            if side is not None:  # what the lmdeploy export sends for an image cap
                fields = render_export(cfg, fmt=args.server_format, model=ckpt).request
            w = with_workload(space, concurrency, left).workload
            plan = PassPlan(
                prompts=chat_prompts(evalset),
                config=cfg,
                fields=fields,
                warmup_requests=w.warmup_requests,
                requests=w.requests,
                request_rate_per_s=None,
                measure_accuracy=False,
            )
            started = time.monotonic()
            try:
                passes = drive_passes(
                    ready.base_url,
                    ready.models[0],
                    plan,
                    timeout_s=left,
                    on_phase=None,
                    log_tail=server.log_tail,
                    server_exited=lambda: server.process.poll() is not None,
                )
            except TrialFailure as failure:
                row.status, row.error = failure.kind, failure.reason
                bench.log(f"{row.name}: {row.status} {row.error[:200]}")
                continue
            timings = [RequestTiming(**t) for t in passes["timings"]]
            record(
                row,
                summarize(timings),
                {
                    "peak_memory_mib": sampler.peak_mib,
                    "memory_source": sampler.source,
                    "startup_s": ready.startup_s,
                    "compile_s": passes["compile_s"],
                },
            )
            row.wall_s = time.monotonic() - started
            row.status = "ok"
            bench.log(f"{row.name}: ok")
            bench.save()
    except TrialFailure as failure:
        for row in rows:
            if row.status == "skipped":
                row.status, row.error = failure.kind, failure.reason
        bench.log(f"server: {failure.kind}: {failure.reason}\n{failure.log_tail}")
    finally:
        peak, source = sampler.stop()
        server.stop()
        for row in rows:
            if row.status == "ok":
                row.notes = f"server peak over the whole run: {peak:.0f} MiB ({source})"
    bench.save()


TRANSFORMERS_ROWS: list[dict[str, Any]] = [
    # name, compile mode, batch, time cap, minimum time to start it at all
    {"name": "hf-dynamic-b1", "compile_mode": "none", "batch": 1, "cap": 120, "minimum": 60},
    {"name": "hf-static-compile-b1", "compile_mode": "reduce-overhead", "batch": 1, "cap": 150,
     "minimum": 90},
    {"name": "hf-dynamic-b16", "compile_mode": "none", "batch": 16, "cap": 90, "minimum": 50},
    {"name": "hf-static-compile-b16", "compile_mode": "reduce-overhead", "batch": 16, "cap": 180,
     "minimum": 110},
    {"name": "hf-dynamic-b64", "compile_mode": "none", "batch": 64, "cap": 120, "minimum": 60},
]  # fmt: skip


def _fmt(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "—"


def markdown_table(bench: Bench) -> str:
    lines = [
        "| row | engine | batch / concurrency | image | TTFT p50 ms | TPOT p50 ms | e2e p50 ms "
        "| e2e p95 ms | output tok/s | req/s | peak MiB | start-up s | warm-up s | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in bench.rows:
        f = row.figures
        status = row.status
        if row.error:
            status = (
                row.error[:80]
                if row.error.startswith(row.status)
                else f"{status}: {row.error[:80]}"
            )
        lines.append(
            f"| {row.name} | {row.engine} | {row.batch} | {row.image} "
            f"| {_fmt(f.get('ttft_p50_ms'), '.0f')} | {_fmt(f.get('tpot_p50_ms'), '.2f')} "
            f"| {_fmt(f.get('e2e_latency_p50_ms'), '.0f')} "
            f"| {_fmt(f.get('e2e_latency_p95_ms'), '.0f')} "
            f"| {_fmt(f.get('throughput_output_tokens_per_s'), ',.0f')} "
            f"| {_fmt(f.get('throughput_requests_per_s'), '.2f')} "
            f"| {_fmt(row.peak_memory_mib, ',.0f')} | {_fmt(row.startup_s, '.1f')} "
            f"| {_fmt(row.warmup_s, '.1f')} | {status} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--deadline-s", type=float, default=420)
    parser.add_argument("--model", default="Qwen/Qwen3-VL-2B-Instruct")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--server-format", default="lmdeploy", choices=["lmdeploy", "vllm", "swift"]
    )
    parser.add_argument("--server-cap-s", type=float, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument(
        "--rows", nargs="*", default=None, help="transformers rows to run (default: all)"
    )
    parser.add_argument("--no-server", action="store_true", help="transformers rows only")
    args = parser.parse_args(argv)
    bench = Bench(args)
    bench.meta["environment"] = environment()
    bench.meta["args"] = {k: str(v) for k, v in vars(args).items()}
    bench.log(json.dumps(bench.meta["environment"]))
    try:
        started = time.monotonic()
        ckpt = dummy_checkpoint(args.model, device="auto" if args.device == "cuda" else "cpu")
        bench.meta["checkpoint"] = {"path": ckpt, "ready_s": time.monotonic() - started}
        bench.log(f"dummy checkpoint {ckpt} ready in {time.monotonic() - started:.1f} s")
        evalset = write_evalset(Path(tempfile.mkdtemp(prefix="bench-evalset-")))
        space = base_space(args, evalset)
        specs = [s for s in TRANSFORMERS_ROWS if args.rows is None or s["name"] in args.rows]
        run_transformers(bench, space, ckpt, specs[0]) if specs else None
        if not args.no_server:
            run_server(bench, space, ckpt)
        for spec in specs[1:]:
            run_transformers(bench, space, ckpt, spec)
    except Exception:  # the table below is printed whatever broke
        bench.meta["error"] = traceback.format_exc()
        print(bench.meta["error"], flush=True)
    bench.save()
    table = markdown_table(bench)
    (bench.out / "side_by_side.md").write_text(table + "\n")
    print(table, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
