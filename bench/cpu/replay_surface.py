"""The H200 response surface the replay benchmark searches: what the default space measures.

Measured on the H200 (LMDeploy 0.18, PyTorch engine, CUDA graphs, KV share 0.3, bf16, random
weights, 128-token answers spread +-50%): bench/results/h200-study-beside-grid-2026-11-30.json (two
studies), h200-verify-and-relaunches-2026-12-01.json, h200-study-2026-12-01.json (its grid) and the
fourth session's grid (../shared/data/h200-turn4/grid.json). Where nothing was measured the
surface is a model of the same shape, fitted to those points by hand:

- throughput = a concurrency curve x an image-side factor x factors for eager mode, the KV
  share and the repetition penalty; dtype (bf16/fp16) and greedy vs sampled decoding moved
  it by less than the launch spread, so they do not enter;
- p95 end-to-end latency = the time one request's share of the batch takes at that rate,
  times a tail factor that grows with the batch (1.07 at 1, 1.35 at 64), which reproduces
  the measured p95s within about 10%;
- the noise of a measurement: each request's length in time varies by a lognormal factor
  (CV 12%); each launch's pace swings in waves of prefill and decode (a sine of 8-12 s whose
  phase drifts, its amplitude fitted to the H200's 5-second windows and measuring times:
  WAVE_*); each launch is offset by a normal factor (SD 3%: bench/results/
  h200-relaunches-spread-lengths-2026-12-01.md measured 2.6%); and a load starts at 60% of
  its rate for its first round of requests (the warm-up the stop rule cuts);
- start-up: 15 s for the transformers reference, 60 s for LMDeploy with CUDA graphs, 45 s
  without (measured 48-91 s and 45-65 s).

vLLM and tensor parallelism 2 are not in the surface: the H200 image has no vLLM and one GPU,
and a real study there drops both before its first trial.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

# tokens/s at image side "full" (no cap), CUDA graphs, KV share 0.3, by concurrency. Points:
# 64: 1860-2187 (mean of 6 launches ~2000); 32: 1740; 16: ~1500 (1799 at side 768 / 1.2);
# 8: ~950 (1097-1170 at 768); 1: ~257 (334 at side 512 / 1.3).
CONCURRENCY_TPS = {1: 257.0, 8: 950.0, 16: 1500.0, 32: 1740.0, 64: 2000.0}
# At concurrency 64: 2038 / 2096-2253 / 2291-2536 / 2619-2670 (full / 1024 / 768 / 512).
SIDE_FACTOR = {None: 1.0, 1024: 1.07, 768: 1.2, 512: 1.3}
# Eager mode (no CUDA graphs): 536 tok/s against ~2090 at concurrency 32, side 768.
EAGER_FACTOR = 0.27
KV_FACTOR = {0.3: 1.0, 0.15: 0.97}  # 1721 vs 1799 at 16, side 768
PENALTY_FACTOR = {1.0: 1.0, 1.05: 0.98}
REFERENCE_TPS = 32.0  # transformers, batch 1 (30.6-40.1 measured)
REFERENCE_P95_S = 4.7

REQUEST_CV = 0.12
# A launch's rate swings in waves of prefill and decode: on the H200, at concurrency 64, 5-second
# windows of streamed tokens scatter with CV 9% and a negative lag-1 autocorrelation (-0.6 and
# -0.1 on two launches: a wave of about 10 s), and two launches agree within 1.7% over 75 s
# (../shared/data/h200-turn3/h200-stream-probe.json). The replay's wave: a sine of this
# amplitude and a period drawn per launch, its phase drifting at random. At 0.18 the replay's
# 5-second windows at 64 in flight scatter with CV 7% (lag-1 -0.46), and its load tests there
# converge in 66-151 s (median 97 s; the H200 took 54-123 s): noisier than the GPU, not less.
WAVE_AMPLITUDE = 0.18
WAVE_PERIOD_S = (8.0, 12.0)
WAVE_DRIFT = 0.5
LAUNCH_SD = 0.03
WARMUP_RATE_SHARE = 0.6
STARTUP_S = {"transformers": 15.0, "lmdeploy-graphs": 60.0, "lmdeploy-eager": 45.0}

# The default space as the H200 runs it (no vLLM, one GPU): the levers that move throughput.
GRID = {
    "compile_mode": ["none", "default"],
    "kv_cache_fraction": [0.15, 0.3],
    "image_max_side": [None, 1024, 768, 512],
    "batch_size": [1, 8, 16, 32, 64],
    "repetition_penalty": [1.0, 1.05],
}


def tokens_per_s(config: dict[str, Any]) -> float:
    """The surface's true rate for a trial configuration (the noise-free throughput)."""
    if config.get("backend") == "transformers":
        return REFERENCE_TPS
    rate = CONCURRENCY_TPS[int(config["batch_size"])]
    rate *= SIDE_FACTOR[config.get("image_max_side")]
    if config.get("compile_mode") == "none":
        rate *= EAGER_FACTOR
    rate *= KV_FACTOR.get(config.get("kv_cache_fraction") or 0.3, 1.0)
    rate *= PENALTY_FACTOR.get(float(config.get("repetition_penalty") or 1.0), 1.0)
    return rate


def p95_s(config: dict[str, Any], tokens: int = 128) -> float:
    """The surface's p95 end-to-end latency for a configuration, in seconds."""
    if config.get("backend") == "transformers":
        return REFERENCE_P95_S
    batch = int(config["batch_size"])
    return batch * tokens / tokens_per_s(config) * (1.07 + 0.28 * batch / 64)


def startup_s(config: dict[str, Any]) -> float:
    if config.get("backend") == "transformers":
        return STARTUP_S["transformers"]
    return STARTUP_S[
        "lmdeploy-eager" if config.get("compile_mode") == "none" else "lmdeploy-graphs"
    ]


def grid_points() -> list[dict[str, Any]]:
    """Every LMDeploy configuration of the grid (greedy decoding: sampling does not move it)."""
    keys = list(GRID)
    base = {"backend": "lmdeploy", "dtype": "bfloat16", "do_sample": False}
    return [
        dict(base, **dict(zip(keys, values, strict=True)))
        for values in itertools.product(*GRID.values())
    ]


def best_rate() -> float:
    return max(tokens_per_s(point) for point in grid_points())


def share_of_best(config: dict[str, Any] | None) -> float:
    """A recommended configuration's true rate over the surface's best (0 when none)."""
    if not config:
        return 0.0
    rate = tokens_per_s(config)
    return rate / best_rate() if math.isfinite(rate) else 0.0
