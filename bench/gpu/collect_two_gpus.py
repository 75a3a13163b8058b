"""Two GPUs against one: the studies `run.sh two-gpus` leaves in $OUT.

    python3 bench/gpu/collect_two_gpus.py OUT_DIR   # prints JSON; writes OUT_DIR/two-gpus.json

Reads the one-GPU and two-GPU studies of bench/gpu/two-gpus.yaml and the tensor-parallel study
of bench/gpu/tensor-parallel.yaml, with the wall times the script recorded, and checks: the two-GPU
run took at most 0.6x the one-GPU run's wall time; both measured the same configurations, none
lost (failed, left running) or measured twice; the tp-2 trial completed on two GPUs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import optuna
from optuna.trial import TrialState

from autotune.study.store.storage import open_storage


def _study(path: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=open_storage(str(path), create=False))


def _summary(study: optuna.Study) -> dict[str, object]:
    trials = study.get_trials(deepcopy=False)
    measured = [t for t in trials if t.state == TrialState.COMPLETE]
    configs = [json.dumps(t.user_attrs.get("config"), sort_keys=True) for t in measured]
    return {
        "trials": len(trials),
        "complete": len(measured),
        "failed": [
            (t.number, t.user_attrs.get("failure_reason"))
            for t in trials
            if t.state != TrialState.COMPLETE
        ],
        "running_left": sum(t.state == TrialState.RUNNING for t in trials),
        "measured_twice": len(configs) - len(set(configs)),
        "configs": sorted(configs),
        "gpus": sorted({g["index"] for t in measured for g in t.user_attrs.get("gpus", [])}),
        "throughput_tokens_per_s": {
            t.user_attrs.get("candidate") or "reference": t.user_attrs.get(
                "throughput_output_tokens_per_s"
            )
            for t in measured
        },
    }


def main(out: Path) -> dict[str, object]:
    walls = json.loads((out / "two-gpus-walls.json").read_text())
    one = _summary(_study(out / "two-gpus-1.journal", "two-gpus-1"))
    two = _summary(_study(out / "two-gpus-2.journal", "two-gpus-2"))
    tp_study = _study(out / "tensor-parallel.journal", "tensor-parallel")
    tp = [t for t in tp_study.get_trials(deepcopy=False) if t.user_attrs.get("candidate") == "tp-2"]
    tp_attrs = tp[0].user_attrs if tp else {}
    ratio = walls["two_gpus_s"] / walls["one_gpu_s"]
    result = {
        "wall_one_gpu_s": walls["one_gpu_s"],
        "wall_two_gpus_s": walls["two_gpus_s"],
        "ratio": ratio,
        "ratio_ok": ratio <= 0.6,
        "one_gpu": one,
        "two_gpus": two,
        "same_configurations": one["configs"] == two["configs"],
        "none_lost_or_twice": all(
            s["complete"] == 6 and not (s["failed"] or s["running_left"] or s["measured_twice"])
            for s in (one, two)
        ),
        "tp2_trial": {
            "state": tp[0].state.name if tp else None,
            "gpus": [g["index"] for g in tp_attrs.get("gpus", [])],
            "throughput_tokens_per_s": tp_attrs.get("throughput_output_tokens_per_s"),
            "failure_reason": tp_attrs.get("failure_reason"),
        },
    }
    (out / "two-gpus.json").write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/out")), indent=2))
