"""Where a trial came from and what it changed: the words the progress lines and `best` use.

A line that says "trial 4: 61.2 tok/s" leaves the reader to the report or the database to
learn what trial 4 was. Each trial is one of: the reference, a named candidate, a one-lever
step from an incumbent (autotune.study.proposals.steering, recorded as `step`), a repeat of a
trial already measured, or the sampler's own proposal; and its configuration is told by the
values that differ from the reference's.
"""

from __future__ import annotations

from typing import Any

from autotune.params import PARAM_NAMES
from autotune.records.stored import TrialRecord


def _word(value: Any) -> str:
    # A sampled float shows 3 significant digits; the export keeps the exact value.
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def source_words(record: TrialRecord) -> str:
    """'reference', 'candidate NAME', the baseline's label ("swift deploy's defaults"),
    'step LEVER -> VALUE from trial N', 'repeat of trial N' or 'sampler'."""
    if record.is_reference:
        return "reference"
    if record.candidate:
        return f"candidate {record.candidate}"
    if record.baseline:
        return str(record.baseline)
    if record.duplicate_of is not None:
        return f"repeat of trial {record.duplicate_of}"
    step = record.step
    if step is not None:
        words = f"step {step.lever} -> {_word(step.value)} from trial {step.from_trial}"
        also = step.also
        return words + (f" (also changed: {', '.join(also)})" if also else "")
    return "sampler"


def differences(config: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
    """The values of `config` that differ from the reference configuration's."""
    if not reference:
        return {}
    return {
        name: config.get(name)
        for name in PARAM_NAMES
        if name in config and config.get(name) != reference.get(name)
    }


def difference_words(config: dict[str, Any], reference: dict[str, Any] | None) -> str:
    """'batch_size=8 image_max_side=256', or 'as the reference'."""
    changed = differences(config, reference)
    if not changed:
        return "as the reference"
    return " ".join(f"{name}={_word(value)}" for name, value in changed.items())


def provenance(record: TrialRecord, reference: dict[str, Any] | None) -> str:
    """'step image_max_side -> 64 from trial 1: batch_size=8 image_max_side=64'."""
    source = source_words(record)
    if record.is_reference or not record.config or reference is None:
        return source
    return f"{source}: {difference_words(record.config, reference)}"


def reference_config(trials: list[Any]) -> dict[str, Any] | None:
    """The configuration of the study's reference trial (None before it has one)."""
    for trial in trials:
        record = TrialRecord.of(trial)
        if record.is_reference and record.config:
            return record.config
    return None
