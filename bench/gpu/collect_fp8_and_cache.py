"""FP8 against bf16 and the prefix cache off against on, from the studies that
`run.sh fp8-and-cache` and `run.sh guide-recipe` leave in $OUT.

    python3 bench/gpu/collect_fp8_and_cache.py OUT_DIR   # writes OUT_DIR/fp8-and-cache.json

- FP8 weights vs bf16 (LMDeploy, concurrency 64): output tokens/s with its 95% interval, peak
  GPU memory;
- prefix cache off vs on with half the requests resending an image: TTFT p50 and tokens/s;
- the guide's recipe vs the reference vs the tuned recommendation, from a default-space study.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.study.results.select import NoDeployableTrial, recommend
from autotune.study.store.storage import open_storage

FIGURES = (
    "throughput_output_tokens_per_s",
    "throughput_ci_rel",
    "ttft_p50_ms",
    "e2e_latency_p95_ms",
    "peak_memory_mib",
    "measured_requests",
    "startup_s",
)


def _figures(trial: FrozenTrial) -> dict[str, Any]:
    attrs = trial.user_attrs
    return {
        "trial": trial.number,
        "state": trial.state.name,
        "failure_reason": attrs.get("failure_reason"),
        **{name: attrs.get(name) for name in FIGURES},
        "repeated_requests": attrs.get("repeated_requests"),
    }


def _label(trial: FrozenTrial) -> str:
    return str(
        trial.user_attrs.get("candidate")
        or ("reference" if trial.user_attrs.get("is_reference") else trial.number)
    )


def _ratio(a: Any, b: Any) -> float | None:
    return a / b if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def main(out: Path) -> dict[str, Any]:
    storage = open_storage(f"sqlite:///{out}/fp8-and-cache.db", create=False)
    side = {
        _label(t): _figures(t)
        for t in optuna.load_study(study_name="fp8-and-cache", storage=storage).trials
    }
    bf16, fp8, cache = (
        side.get("reference", {}),
        side.get("fp8-weights", {}),
        side.get("prefix-cache", {}),
    )
    tps = "throughput_output_tokens_per_s"
    result: dict[str, Any] = {
        "side_by_side": side,
        "fp8_vs_bf16": {
            "throughput_ratio": _ratio(fp8.get(tps), bf16.get(tps)),
            "peak_memory_ratio": _ratio(fp8.get("peak_memory_mib"), bf16.get("peak_memory_mib")),
        },
        "prefix_cache_on_vs_off": {
            "ttft_p50_ratio": _ratio(cache.get("ttft_p50_ms"), bf16.get("ttft_p50_ms")),
            "throughput_ratio": _ratio(cache.get(tps), bf16.get(tps)),
        },
    }
    default_db = out / "guide-recipe.db"
    if default_db.is_file():
        study = optuna.load_study(
            study_name="guide-recipe",
            storage=open_storage(f"sqlite:///{default_db}", create=False),
        )
        named = {
            _label(t): _figures(t)
            for t in study.trials
            if t.user_attrs.get("candidate") or t.user_attrs.get("is_reference")
        }
        try:
            rec = recommend(study)
            named["recommendation"] = _figures(rec.trial) if rec is not None else {}
        except NoDeployableTrial as exc:
            named["recommendation"] = {"none": str(exc)}
        result["guide_vs_reference_vs_recommendation"] = named
    (out / "fp8-and-cache.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1])), indent=2))
