"""The reference's answers past its own trial: one study attribute per extension.

The reference trial records the answers it gave (autotune.study.run.objective); a finished
trial takes no more attributes, so the answers it gives later, when a candidate's floor needs
more items (autotune.study.run.reference_load), are stored on the study, one key per
extension, named after the items it added: two processes that extend a shared study by the
same items write the same key. Each says which items it added, when, how long it took and
where its answers came from.
"""

from __future__ import annotations

import hashlib
from typing import Annotated

import optuna
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from autotune.records.stored import validation_problem

PREFIX = "reference_extension_"
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class ReferenceExtension(BaseModel):
    """Answers the reference gave after its trial ended."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    stage: int = Field(ge=1, description="The reference's stage it completed (1: its trial's).")
    answered_items: int = Field(ge=0, description="Items of the decision order answered after it.")
    predictions: dict[str, str] = Field(description="item id -> the reference's answer.")
    item_scores: dict[str, Fraction]
    item_passed: dict[str, bool]
    computed: int = Field(ge=0, description="Answers computed (the rest came from the cache).")
    cache_entry: str | None = Field(None, description="The answers cache entry it read, if any.")
    for_trial: int | None = Field(None, description="The trial whose floor asked for it.")
    started: str = Field(description="When it started (ISO 8601, UTC).")
    seconds: float = Field(ge=0.0, description="How long it took, the engine's start included.")
    batch_size: int = Field(ge=1, description="The batch its answers were computed in.")

    def key(self) -> str:
        """Its study attribute: named after the items it added."""
        ids = "\n".join(sorted(self.predictions)).encode()
        return PREFIX + hashlib.sha256(ids).hexdigest()[:12]


def extensions(attrs: dict[str, object]) -> tuple[list[ReferenceExtension], list[str]]:
    """The extensions a study's attributes hold, by stage, and one problem line for each
    that does not read as one (it is left out: its items are answered again if needed)."""
    found: list[ReferenceExtension] = []
    problems: list[str] = []
    for key, value in attrs.items():
        if not key.startswith(PREFIX):
            continue
        try:
            found.append(ReferenceExtension.model_validate(value))
        except ValidationError as exc:
            problems.append(f"{key}: {validation_problem(exc)}")
    return sorted(found, key=lambda e: (e.stage, e.started)), problems


def study_extensions(study: optuna.Study) -> tuple[list[ReferenceExtension], list[str]]:
    return extensions(study.user_attrs)
