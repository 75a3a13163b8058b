"""On the GPU: what the floor decided for the reader served by LMDeploy, and how the
LMDeploy answers agree with the in-process engine's, item by item.

Reads the study that `bench/gpu/smoke-lmdeploy.yaml` ran (its reference: transformers in
process; its candidates: `lmdeploy serve api_server` at full size and shrunk) and writes
through-lmdeploy.json and through-lmdeploy.md: per trial its engine, image side, accuracy on
the items it answered, the floor's verdict and interval, and the share of items on which its
answers equal the reference's word for word. With --inprocess DIR (a folder of
`autotune eval --space bench/gpu/smoke-lmdeploy.yaml --json [--param image_max_side=N]`
outputs named eval-full.json,
eval-N.json, as `bench/gpu/run.sh accuracy-through-lmdeploy` writes them), also the share on
which each LMDeploy trial's answers equal the in-process engine's at the same image side.

    python3 bench/gpu/collect_accuracy_through_lmdeploy.py \
        --storage sqlite:///$OUT/through-lmdeploy.db --study through-lmdeploy \
        --out $OUT [--inprocess DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import optuna

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from autotune.records.stored import TrialRecord  # noqa: E402


def inprocess_answers(folder: Path | None) -> dict[int | None, dict[str, str]]:
    """The in-process engine's answers per image side (None: full size), from eval JSONs."""
    if folder is None:
        return {}
    answers: dict[int | None, dict[str, str]] = {}
    for path in sorted(folder.glob("eval-*.json")):
        side = path.stem.removeprefix("eval-")
        if not re.fullmatch(r"full|[0-9]+", side):  # str.isdigit takes "²", int() does not
            raise SystemExit(f"error: {path}: name it eval-full.json or eval-N.json (N: a side)")
        answers[None if side == "full" else int(side)] = json.loads(path.read_text())["predictions"]
    return answers


def agreement(answers: dict[str, str], other: dict[str, str]) -> tuple[float | None, int]:
    """The share of the items both answered on which the answers are equal, and their count."""
    shared = [i for i in answers if i in other]
    if not shared:
        return None, 0
    return sum(answers[i] == other[i] for i in shared) / len(shared), len(shared)


def rows(study: optuna.Study, inprocess: dict[int | None, dict[str, str]]) -> list[dict[str, Any]]:
    trials = study.get_trials(deepcopy=False)
    reference = next((t for t in trials if t.user_attrs.get("is_reference")), None)
    ref_answers = TrialRecord.of(reference).predictions if reference else {}
    out = []
    for trial in trials:
        record = TrialRecord.of(trial)
        answers = record.predictions
        same_as_reference, compared = agreement(answers, ref_answers)
        side = record.config.get("image_max_side")
        same_as_inprocess, inprocess_compared = (
            agreement(answers, inprocess[side]) if side in inprocess else (None, 0)
        )
        paired = record.paired_vs_reference
        out.append(
            {
                "trial": trial.number,
                "state": trial.state.name,
                "name": "reference"
                if record.is_reference
                else record.candidate or ("step" if record.step else "sampler"),
                "backend": record.config.get("backend"),
                "image_max_side": record.config.get("image_max_side"),
                "accuracy": record.accuracy,
                "items_answered": len(record.item_scores),
                "same_answers_as_reference": same_as_reference,
                "items_compared": compared,
                "same_answers_as_inprocess_at_side": same_as_inprocess,
                "inprocess_items_compared": inprocess_compared,
                "verdict": paired.decision if paired else None,
                "interval": [paired.ci_low, paired.ci_high] if paired else [None, None],
                "infeasible_because": record.infeasible_because,
                "throughput_output_tokens_per_s": trial.user_attrs.get(
                    "throughput_output_tokens_per_s"
                ),
                "failure_reason": record.failure_reason,
            }
        )
    return out


def _share(share: float | None, items: int) -> str:
    return "-" if share is None else f"{share:.3f} of {items}"


def markdown(table: list[dict[str, Any]]) -> str:
    lines = [
        "# The reader through LMDeploy, judged by the sequential floor",
        "",
        "| trial | name | engine | image side | accuracy (items) | same answers as the reference | same answers as in-process at this side | verdict | interval | tok/s |",  # noqa: E501
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.3f} ({r['items_answered']})"
        same = _share(r["same_answers_as_reference"], r["items_compared"])
        inproc = _share(r["same_answers_as_inprocess_at_side"], r["inprocess_items_compared"])
        low, high = r["interval"]
        interval = "-" if low is None else f"[{low:+.3f}, {high:+.3f}]"
        tps = r["throughput_output_tokens_per_s"]
        lines.append(
            f"| {r['trial']} | {r['name'] or 'sampler'} | {r['backend']} | {r['image_max_side'] or 'full'} | {acc} | {same} | {inproc} | "  # noqa: E501
            f"{r['verdict'] or r['state'].lower()} | {interval} | {'-' if tps is None else f'{tps:.0f}'} |"  # noqa: E501
        )
    failed = [r for r in table if r["failure_reason"]]
    for r in failed:
        lines.append(f"\ntrial {r['trial']} ({r['name']}): {r['failure_reason']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", required=True)
    parser.add_argument("--study", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--inprocess",
        type=Path,
        default=None,
        help="folder of `autotune eval --json` outputs: eval-full.json, eval-N.json",
    )
    args = parser.parse_args(argv)
    inprocess = inprocess_answers(args.inprocess)
    try:
        study = optuna.load_study(study_name=args.study, storage=args.storage)
    except KeyError:
        raise SystemExit(f"error: no study {args.study!r} in {args.storage}") from None
    table = rows(study, inprocess)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "through-lmdeploy.json").write_text(
        json.dumps(table, indent=1) + "\n", encoding="utf-8"
    )
    text = markdown(table)
    (args.out / "through-lmdeploy.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
