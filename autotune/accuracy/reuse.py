"""Not paying twice for the same answers, and screening before the full evaluation.

Greedy answers depend only on the output-affecting parameters (autotune.params: everything but
batch_size and kv_cache_fraction, and batch_size too when sampling). A trial whose key matches
a completed trial's reuses that trial's scored answers instead of answering the set again.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import cache
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.accuracy.scoring import AccuracyReport
from autotune.accuracy.screening import ScreeningRequest
from autotune.evalset.dataset import EvalSet
from autotune.params import TrialConfig
from autotune.records.stored import TrialRecord
from autotune.space import SearchSpace


@cache
def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def accuracy_key(config: TrialConfig, evalset: EvalSet) -> str:
    """A stable string naming the answers this configuration gives on this set."""
    key = {"config": config.output_key(), "evalset": _file_digest(Path(evalset.path))}
    return json.dumps(key, sort_keys=True)


def find_reusable(study: optuna.Study, key: str) -> FrozenTrial | None:
    """A completed trial with the same answers key and a full set of scored answers."""
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        record = TrialRecord.of(trial)
        if record.output_key == key and "item_passed" in record.model_fields_set:
            return trial
    return None


def stored_accuracy(trial: FrozenTrial) -> AccuracyReport:
    record = TrialRecord.of(trial)
    return AccuracyReport(
        accuracy=float(record.accuracy if record.accuracy is not None else math.nan),
        by_category=dict(record.accuracy_by_category),
        item_scores=dict(record.item_scores),
        item_passed=dict(record.item_passed),
    )


def screening_ids(evalset: EvalSet, n: int) -> list[str]:
    """A fixed subset of `n` items, drawn round-robin over categories so each is represented."""
    return evalset.balanced_ids()[:n]


def screening_request(
    space: SearchSpace, evalset: EvalSet, reference: FrozenTrial | None
) -> ScreeningRequest | None:
    """Screening for a candidate, when the space asks for it and a reference exists."""
    accuracy = space.constraints.accuracy
    if (
        space.screening.items == 0
        or reference is None
        or not accuracy.enabled
        or accuracy.mode != "relative"
        or space.screening.items >= len(evalset.items)
    ):
        return None
    ref = stored_accuracy(reference)
    return ScreeningRequest(
        ids=screening_ids(evalset, space.screening.items),
        reference_scores=ref.item_scores,
        reference_passed=ref.item_passed,
        max_drop=accuracy.max_drop,
        confidence=space.screening.confidence,
    )
