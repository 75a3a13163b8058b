"""How often the sequential accuracy floor accepts a candidate, and how many items it spends.

Planted candidates: paired answers drawn for a candidate whose true accuracy drop and share of
answers unlike the reference's (discordance) are known, run through the floor's own staged
code (autotune.accuracy.staged.FloorRequest over autotune.accuracy.reuse's stage plan), under
the default space's settings and the smoke space's. Per cell: the share accepted with its
95% binomial interval, and the median items spent; for a candidate that loses less than the
margin, the items a fixed-size one-sided paired z-test would need to accept as often.

With --reader, also the bundled reader's real answer pairs: every searched image side against
full size (the smoke space's reference), resampled with replacement, verdicts against each
side's measured drop.

Usage (from the repository root)::

    python bench/cpu/floor_error_rates.py --seeds 500 --reader --check \
        --out bench/results --name floor-error-rates-2026-12-03
    python bench/cpu/floor_error_rates.py --seeds 40 --settings smoke      # a quick look

With --whole-study, planted whole studies instead (bench/cpu/floor_whole_study.py): how often
the recommendation itself loses max_drop or more, with the held-out confirmation::

    nice python bench/cpu/floor_error_rates.py --whole-study --seeds 500 --check \
        --out bench/results --name floor-whole-study-2026-12-07-confirm-when-faster

`--check` exits 1 unless every cell whose true drop is at least the margin accepts no more
often than 1 - confidence (within its binomial margin), the default settings accept a
candidate that loses nothing in >= 90% of seeds at discordance <= 0.05 and >= 50% at 0.10,
and the reader's verdicts match its drops. Where the median items are below a fixed set's
that accepts as often is reported beside it, not checked.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from autotune.accuracy.reuse import FIRST_STAGE_ITEMS  # noqa: E402
from autotune.accuracy.sequential import items_to_decide, planted_diffs, stage_sizes  # noqa: E402
from autotune.accuracy.staged import FloorRequest  # noqa: E402
from bench.cpu import floor_whole_study as studies  # noqa: E402

DROPS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.10)
DISCORDANCES = (0.02, 0.05, 0.10, 0.20)
SPOT_CHECKS = 2  # seeds a cell also runs through the staged looks one by one


@dataclass(frozen=True)
class Setting:
    name: str
    pool: int
    max_drop: float
    confidence: float
    batch: int


SETTINGS = {
    # search_spaces/default.yaml: ocr-caption-3k, max_drop 0.02, confidence 0.9, batch 32
    "default": Setting("default", 3000, 0.02, 0.9, 32),
    # search_spaces/smoke.yaml: the 240-item smoke set, max_drop 0.05, confidence 0.95, batch 8
    "smoke": Setting("smoke", 240, 0.05, 0.95, 8),
}


def staged_request(setting: Setting) -> FloorRequest:
    order = [str(i) for i in range(setting.pool)]
    return FloorRequest(
        order=order,
        stages=stage_sizes(setting.pool, first=FIRST_STAGE_ITEMS, batch=setting.batch),
        reference_scores=dict.fromkeys(order, 0.0),
        margin=-setting.max_drop,
        confidence=setting.confidence,
    )


def run_floor(setting: Setting, diffs: np.ndarray) -> tuple[str, int]:
    """The floor's verdict and the items it answered, as a trial's accuracy pass gets them:
    a look after each stage of the staged request, until one decides."""
    request = staged_request(setting)
    for size in request.stages:
        verdict = request.judge({request.order[i]: float(diffs[i]) for i in range(size)})
        if verdict.decision != "undecided":
            return verdict.decision, size
    return "undecided", setting.pool


def run_floors(setting: Setting, diffs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """run_floor for many sequences at once (columns): the verdict after every item in one
    pass, then the first stage that holds the deciding item, which is where the staged looks
    decide (tests/accuracy/test_sequential.py; `cell` checks some against run_floor)."""
    verdicts, counts = items_to_decide(
        diffs, margin=-setting.max_drop, confidence=setting.confidence
    )
    stages = np.array(staged_request(setting).stages)
    spent = stages[np.minimum(np.searchsorted(stages, counts), len(stages) - 1)]
    return verdicts, np.where(verdicts == "undecided", setting.pool, spent)


def fixed_items(setting: Setting, drop: float, discordance: float, accept: float) -> float | None:
    """Items a fixed-size one-sided paired z-test at 1 - confidence needs to accept a
    candidate of this cell as often as the sequential floor did (None past the margin)."""
    if drop >= setting.max_drop or accept <= 1 - setting.confidence:
        return None
    sd = math.sqrt(discordance - drop**2)
    z_alpha = stats.norm.ppf(setting.confidence)
    z_power = stats.norm.ppf(min(accept, 0.99))
    return ((z_alpha + z_power) * sd / (setting.max_drop - drop)) ** 2


def cell(setting: Setting, drop: float, discordance: float, seeds: int) -> dict[str, object]:
    rng = np.random.default_rng([int(drop * 1000), int(discordance * 1000), setting.pool])
    diffs = np.stack(
        [
            planted_diffs(rng, setting.pool, drop=drop, discordance=discordance)
            for _ in range(seeds)
        ],
        axis=1,
    )
    verdicts, items = run_floors(setting, diffs)
    for k in range(min(SPOT_CHECKS, seeds)):  # the one-pass verdicts are the staged code's
        staged = run_floor(setting, diffs[:, k])
        if staged != (verdicts[k], items[k]):
            raise AssertionError(
                f"seed {k}: staged looks {staged}, one pass {verdicts[k], items[k]}"
            )
    accepted = int(np.sum(verdicts == "feasible"))
    low, high = stats.binomtest(accepted, seeds).proportion_ci(0.95, method="wilson")
    share = accepted / seeds
    fixed = fixed_items(setting, drop, discordance, share)
    return {
        "setting": setting.name,
        "drop": drop,
        "discordance": discordance,
        "seeds": seeds,
        "accepted": share,
        "accepted_ci95": [low, high],
        "rejected": float(np.mean(verdicts == "infeasible")),
        "undecided": float(np.mean(verdicts == "undecided")),
        "median_items": float(np.median(items)),
        "fixed_test_items": fixed,
    }


def reader_pairs(seeds: int) -> list[dict[str, object]]:
    """The bundled reader's real answers per image side, judged against full size."""
    from autotune.accuracy.scoring import score_predictions
    from autotune.evalset.dataset import load_evalset
    from tools.model_card import DEFAULT_MODEL, EVAL_SIZES, evaluate_checkpoint

    evalset = load_evalset("smoke")
    rows = evaluate_checkpoint(DEFAULT_MODEL, device="cpu", dtypes=("float32",), sizes=EVAL_SIZES)
    scores = {
        r["image_max_side"]: score_predictions(evalset, r["predictions"]).item_scores for r in rows
    }
    reference = scores[None]
    setting = SETTINGS["smoke"]
    rng = np.random.default_rng(11)
    results = []
    for side in EVAL_SIZES[1:]:  # the smoke space's sides after full size
        ids = sorted(reference)
        diffs = np.array([scores[side][i] - reference[i] for i in ids])
        drawn = np.stack([rng.choice(diffs, size=setting.pool) for _ in range(seeds)], axis=1)
        verdicts, spent = run_floors(setting, drawn)
        accepted = float(np.mean(verdicts == "feasible"))
        drop = -float(diffs.mean())
        expected = "accept" if drop <= 0.0 else "reject" if drop >= setting.max_drop else "either"
        results.append(
            {
                "image_max_side": side,
                "accuracy": float(np.mean([scores[side][i] for i in ids])),
                "drop": drop,
                "discordance": float(np.mean(diffs != 0)),
                "accepted": accepted,
                "median_items": float(np.median(spent)),
                "expected": expected,
                "matches": expected == "either"
                or (expected == "accept" and accepted >= 0.9)
                or (expected == "reject" and accepted <= 1 - setting.confidence),
            }
        )
    return results


def checks(cells: list[dict[str, object]], reader: list[dict[str, object]]) -> list[str]:
    failures = []
    for c in cells:
        setting = SETTINGS[str(c["setting"])]
        alpha = 1 - setting.confidence
        if float(c["drop"]) >= setting.max_drop and c["accepted_ci95"][0] > alpha:  # type: ignore[index]
            failures.append(
                f"{c['setting']} drop {c['drop']} discordance {c['discordance']}: accepted {c['accepted']:.3f} > {alpha:g}"  # noqa: E501
            )
        if c["setting"] == "default" and c["drop"] == 0.0:
            floor = (
                0.9
                if float(c["discordance"]) <= 0.05
                else 0.5
                if float(c["discordance"]) <= 0.10
                else 0.0
            )
            if float(c["accepted"]) < floor:
                failures.append(
                    f"default, no drop, discordance {c['discordance']}: accepted {c['accepted']:.3f} < {floor}"  # noqa: E501
                )
    failures += [f"reader side {r['image_max_side']}: {r}" for r in reader if not r["matches"]]
    return failures


def items_summary(cells: list[dict[str, object]]) -> list[str]:
    """Where the floor's median items are below the fixed test's that accepts as often (the
    default settings, a candidate that loses nothing): reported, not checked, since an
    anytime-valid test pays for its looks where answers differ often."""
    lines = []
    for c in cells:
        fixed = c["fixed_test_items"]
        if c["setting"] == "default" and c["drop"] == 0.0 and fixed is not None:
            below = float(c["median_items"]) < float(fixed)  # type: ignore[arg-type]
            verdict = "below" if below else "NOT below"
            lines.append(
                f"- discordance {c['discordance']:.2f}: median {c['median_items']:,.0f} items "
                f"vs {float(fixed):,.0f} for a fixed set ({verdict})"  # type: ignore[arg-type]
            )
    return lines


def markdown(
    cells: list[dict[str, object]],
    reader: list[dict[str, object]],
    seconds: float,
    failures: list[str],
) -> str:
    lines = [
        "# The sequential accuracy floor's error rates",
        "",
        "`python bench/cpu/floor_error_rates.py "
        + " ".join(sys.argv[1:])
        + f"` ({seconds:.0f} s).",
        "Planted candidates run through the floor's staged code (autotune.accuracy.staged); "
        "'fixed test' is the one-sided paired z-test size that accepts as often.",
        "",
    ]
    for name, setting in SETTINGS.items():
        rows = [c for c in cells if c["setting"] == name]
        if not rows:
            continue
        lines += [
            f"## {name}: {setting.pool} items, max_drop {setting.max_drop}, confidence {setting.confidence} (stated error rate <= {1 - setting.confidence:.2f})",  # noqa: E501
            "",
            "| true drop | discordance | accepted (95% CI) | rejected | undecided | median items | fixed test items |",  # noqa: E501
            "|---|---|---|---|---|---|---|",
        ]
        for c in rows:
            low, high = c["accepted_ci95"]  # type: ignore[misc]
            fixed = c["fixed_test_items"]
            lines.append(
                f"| {c['drop']:.2f} | {c['discordance']:.2f} | {c['accepted']:.3f} ({low:.3f}-{high:.3f}) | "  # noqa: E501
                f"{c['rejected']:.3f} | {c['undecided']:.3f} | {c['median_items']:.0f} | "
                f"{'' if fixed is None else f'{fixed:,.0f}'} |"
            )
        lines.append("")
    if reader:
        lines += [
            "## The bundled reader's real answer pairs (smoke settings, resampled to 240 items)",
            "",
            "| image max side | accuracy | drop vs full size | discordance | accepted | median items | expected | matches |",  # noqa: E501
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in reader:
            lines.append(
                f"| {r['image_max_side']} | {r['accuracy']:.3f} | {r['drop']:+.3f} | {r['discordance']:.3f} | "  # noqa: E501
                f"{r['accepted']:.3f} | {r['median_items']:.0f} | {r['expected']} | {r['matches']} |"  # noqa: E501
            )
        lines.append("")
    title = "## Items spent against a fixed set (default settings, no drop)"
    lines += [title, "", *items_summary(cells), ""]
    lines += [
        "## Check",
        "",
        "passed" if not failures else "FAILED:\n\n" + "\n".join(f"- {f}" for f in failures),
        "",
    ]
    return "\n".join(lines)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=positive, default=500, help="draws per cell")
    parser.add_argument(
        "--settings", default="default,smoke", help="comma-separated: default, smoke"
    )
    parser.add_argument("--reader", action="store_true", help="also the bundled reader's answers")
    parser.add_argument("--out", type=Path, default=None, help="folder for NAME.md and NAME.json")
    parser.add_argument("--name", default="floor-error-rates")
    parser.add_argument("--check", action="store_true", help="exit 1 if a promise fails")
    parser.add_argument(
        "--whole-study", action="store_true", help="planted whole studies (k configurations)"
    )
    args = parser.parse_args(argv)
    if args.whole_study:
        return whole_studies(args)
    names = [n for n in args.settings.split(",") if n]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown or not names:
        parser.error(f"--settings: choose from {', '.join(SETTINGS)} (got {args.settings!r})")
    started = time.perf_counter()
    cells = [
        cell(SETTINGS[name], drop, discordance, args.seeds)
        for name in names
        for discordance in DISCORDANCES
        for drop in DROPS
        if drop <= discordance
    ]
    reader = reader_pairs(args.seeds) if args.reader else []
    failures = checks(cells, reader)
    text = markdown(cells, reader, time.perf_counter() - started, failures)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.name}.md").write_text(text, encoding="utf-8")
        payload = {
            "cells": cells,
            "reader": reader,
            "failures": failures,
            "settings": {n: asdict(SETTINGS[n]) for n in names},
        }
        (args.out / f"{args.name}.json").write_text(
            json.dumps(payload, indent=1) + "\n", encoding="utf-8"
        )
    return 1 if args.check and failures else 0


def whole_studies(args: argparse.Namespace) -> int:
    """--whole-study: every setting, k and kind of answers; the check is the stated error."""
    names = [n for n in args.settings.split(",") if n in studies.STUDY_SETTINGS]
    started = time.perf_counter()
    cells = [
        studies.whole_study(studies.STUDY_SETTINGS[name], k, args.seeds, nested=nested)
        for name in names
        for nested in (False, True)
        for k in studies.KS
    ]
    failures = [line for c in cells if (line := studies.check(c)) is not None]
    text = "\n".join(
        [
            "# The whole study's error: how often the recommendation loses max_drop",
            "",
            f"`python bench/cpu/floor_error_rates.py {' '.join(sys.argv[1:])}` "
            f"({time.perf_counter() - started:.0f} s).",
            "",
            *studies.markdown_rows(cells),
            "",
            "## Check",
            "",
            "passed" if not failures else "FAILED:\n\n" + "\n".join(f"- {f}" for f in failures),
            "",
        ]
    )
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.name}.md").write_text(text, encoding="utf-8")
        payload = {"cells": cells, "failures": failures}
        (args.out / f"{args.name}.json").write_text(
            json.dumps(payload, indent=1, default=float) + "\n", encoding="utf-8"
        )
    return 1 if args.check and failures else 0


if __name__ == "__main__":
    sys.exit(main())
