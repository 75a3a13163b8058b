"""Scoring a configuration's answers on an evaluation set: per item, per category, overall."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from autotune.evalset.dataset import EvalSet
from autotune.evalset.metrics import get_metric
from autotune.records.stored import TrialRecord


@dataclass
class AccuracyReport:
    accuracy: float
    by_category: dict[str, float]
    item_scores: dict[str, float]
    item_passed: dict[str, bool]

    def user_attrs(self) -> TrialRecord:
        return TrialRecord.part(
            accuracy=self.accuracy,
            accuracy_by_category=self.by_category,
            item_scores=self.item_scores,
            item_passed=self.item_passed,
            items_scored=len(self.item_scores),
        )


def score_predictions(evalset: EvalSet, predictions: dict[str, str]) -> AccuracyReport:
    """Score every item of `evalset` that has a prediction; a missing answer scores 0."""
    scores: dict[str, float] = {}
    passed: dict[str, bool] = {}
    per_category: dict[str, list[float]] = defaultdict(list)
    for item in evalset.items:
        if item.id not in predictions:
            continue
        metric = get_metric(item.metric)
        score = float(metric.score(predictions[item.id], item.answers))
        scores[item.id] = score
        passed[item.id] = score >= metric.pass_threshold
        per_category[item.category].append(score)
    overall = sum(scores.values()) / len(scores) if scores else 0.0
    by_category = {name: sum(v) / len(v) for name, v in sorted(per_category.items())}
    return AccuracyReport(
        accuracy=overall, by_category=by_category, item_scores=scores, item_passed=passed
    )
