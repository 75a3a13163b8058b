"""GuideLLM as the outside load generator: the study's requests as its dataset, its scenario,
its run and the figures of its report.

GuideLLM (the vLLM project's) because it installs here beside ms-swift and this torch, sends
OpenAI chat completions with image_url parts from a dataset's columns, holds a fixed number
of requests in flight, and writes its figures as JSON. Its 0.8 line needs datasets 5, which
ms-swift 4.6 refuses, hence the pin. AIPerf pins rich, pillow, pandas and psutil below this
project's and brings Kubernetes and Dash; inference-perf needs Python 3.12.

Its media encoder re-encodes every image as JPEG; the dataset carries each image already
encoded (a PNG data URL with its pixel count), so that step is left out and the server decodes
the very pixels autotune's own client sent.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.engines.process import ManagedProcess
from autotune.engines.session import Served
from autotune.errors import AutotuneError
from autotune.outside.requests import OutsideRequest

NAME = "guidellm"
MODULE = "guidellm"  # what the install puts on the import path
INSTALL = "pip install 'autotune[client-guidellm]'"


class OutsideFailure(Exception):
    """The outside tool did not measure: it exited with an error, timed out or wrote no
    report."""


def check_installed() -> None:
    """One line naming the pip command when GuideLLM is not installed (checked before any
    launch: a missing tool should not cost a relaunch)."""
    if importlib.util.find_spec(MODULE) is None:
        raise AutotuneError(f"--client {NAME}: GuideLLM is not installed; {INSTALL}")


def dataset_rows(requests: Sequence[OutsideRequest]) -> list[dict[str, Any]]:
    """One JSONL row per request, in the columns GuideLLM's column mapper reads: `prompt`,
    `image` (already encoded: its data URL, pixels and bytes) and, where lengths are forced,
    `output_tokens_count`."""
    rows = []
    for request in requests:
        row: dict[str, Any] = {
            "prompt": request.prompt,
            "image": {
                "image": request.image_url,
                "image_pixels": request.pixels,
                "image_bytes": len(request.image_url),
            },
        }
        if request.output_tokens is not None:
            row["output_tokens_count"] = request.output_tokens
        rows.append(row)
    return rows


def scenario(
    served: Served,
    *,
    fields: dict[str, Any],
    dataset: Path,
    report: Path,
    requests: int,
    warmup: int,
    concurrency: int,
    rate_per_s: float | None,
) -> dict[str, Any]:
    """The scenario file: every request of `dataset` once, in order, `concurrency` in flight
    (or Poisson arrivals at `rate_per_s`, an open loop's), the first `warmup` left out of its
    figures, `fields` in every body."""
    if rate_per_s is None:
        profile: dict[str, Any] = {"kind": "concurrent", "streams": [concurrency]}
    else:
        profile = {"kind": "poisson", "rate": [rate_per_s]}
    profile["warmup"] = {"mode": "requests", "value": warmup}
    return {
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": served.base_url,
                "model": served.model,
                "request_format": "/v1/chat/completions",
                "extras": {"body": fields},
            },
            "profile": profile,
            "constraints": [{"kind": "max_requests", "count": requests}],
            "data": [
                {"kind": "json_file", "path": str(dataset), "load_kwargs": {"split": "train"}}
            ],
            "data_preprocessors": [],  # no JPEG re-encoding (see the module docstring)
            "data_loader": {"kind": "pytorch", "shuffle": False},
            "outputs": [{"kind": "json", "path": str(report)}],
        }
    }


@dataclass(frozen=True)
class OutsideFigures:
    """What the outside tool measured, read from its own report."""

    tool: str
    version: str
    throughput_output_tokens_per_s: float
    e2e_latency_p50_ms: float | None
    e2e_latency_p95_ms: float | None
    ttft_p50_ms: float | None
    requests_sent: int  # every request it completed, its warm-up's included
    requests_measured: int  # those inside its figures
    errored: int
    concurrency: int | None  # the streams it was told to hold (None: an open loop)
    concurrency_seen: float | None  # the most requests it had in flight at once


def read_report(path: Path) -> OutsideFigures:
    """The figures of GuideLLM's JSON report (its first benchmark)."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        benchmark = report["benchmarks"][0]
        metrics = benchmark["metrics"]
        made = benchmark["scheduler_metrics"]["requests_made"]
        strategy = benchmark["config"]["strategy"]
    except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise OutsideFailure(f"GuideLLM wrote no readable report at {path}: {exc}") from None

    def successful(name: str, key: str) -> float | None:
        stats = (metrics.get(name) or {}).get("successful") or {}
        value = stats.get("percentiles", {}).get(key) if key.startswith("p") else stats.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    def seconds_as_ms(value: float | None) -> float | None:
        return None if value is None else value * 1000.0

    return OutsideFigures(
        tool="GuideLLM",
        version=str(report.get("metadata", {}).get("guidellm_version", "?")),
        throughput_output_tokens_per_s=successful("output_tokens_per_second", "mean") or 0.0,
        e2e_latency_p50_ms=seconds_as_ms(successful("request_latency", "p50")),
        e2e_latency_p95_ms=seconds_as_ms(successful("request_latency", "p95")),
        ttft_p50_ms=successful("time_to_first_token_ms", "p50"),
        requests_sent=int(made.get("successful", 0)),
        requests_measured=int(metrics["request_totals"]["successful"]),
        errored=int(made.get("errored", 0)),
        concurrency=strategy.get("streams") if strategy.get("type_") == "concurrent" else None,
        concurrency_seen=successful("request_concurrency", "max"),
    )


def run(
    served: Served,
    requests: Sequence[OutsideRequest],
    *,
    fields: dict[str, Any],
    warmup: int,
    concurrency: int,
    rate_per_s: float | None,
    workdir: Path,
    timeout_s: float,
) -> OutsideFigures:
    """Write the dataset and scenario into `workdir`, run `python -m guidellm run` on them in
    its own process group (stopped whole on a time-out), and read its report."""
    dataset, report = workdir / "requests.jsonl", workdir / "report.json"
    with dataset.open("w", encoding="utf-8") as handle:
        for row in dataset_rows(requests):
            handle.write(json.dumps(row) + "\n")
    spec = scenario(
        served,
        fields=fields,
        dataset=dataset,
        report=report,
        requests=len(requests),
        warmup=warmup,
        concurrency=concurrency,
        rate_per_s=rate_per_s,
    )
    scenario_path = workdir / "scenario.json"
    scenario_path.write_text(json.dumps(spec, indent=1), encoding="utf-8")
    argv = [
        sys.executable,
        "-m",
        MODULE,
        "run",
        "--scenario",
        str(scenario_path),
        "--disable-progress",
    ]
    with ManagedProcess(argv, log_path=workdir / "guidellm.log", cwd=str(workdir)) as process:
        deadline = time.monotonic() + timeout_s
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        code = process.poll()
        tail = process.log_tail(15)
    if code is None:
        raise OutsideFailure(f"GuideLLM did not finish in {timeout_s:.0f} s:\n{tail}")
    if code != 0:
        raise OutsideFailure(f"GuideLLM exited with status {code}:\n{tail}")
    return read_report(report)
