"""Everything `autotune run` needs, resolved and checked before the database is touched."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from autotune import SCHEMA_VERSION, __version__
from autotune.checkpoints.geometry import read_geometry
from autotune.checkpoints.source import resolve_model
from autotune.client.chat import normalize_base_url
from autotune.errors import SpaceError
from autotune.evalset.dataset import EvalSet, load_evalset
from autotune.space import SearchSpace
from autotune.study.storage import default_storage_url


@dataclass
class StudyPlan:
    space: SearchSpace
    model: str
    model_path: str
    evalset: EvalSet
    study_name: str
    storage_url: str
    endpoint: str | None = None
    notes: list[str] = field(default_factory=list)
    dummy_weights: bool = False
    image_geometry: dict[str, int] = field(default_factory=dict)

    @property
    def budget_s(self) -> float | None:
        return self.space.budget


def plan_study(
    space: SearchSpace,
    *,
    model: str | None = None,
    study_name: str | None = None,
    storage_url: str | None = None,
    endpoint: str | None = None,
    evalset: str | None = None,
    dummy_weights: bool = False,
    budget_s: float | None = None,
) -> StudyPlan:
    """Resolve the model and the eval set; every error here leaves no database behind.

    With `endpoint` the trials measure that running server, and only request-side parameters
    are searched (SearchSpace.for_endpoint). With `dummy_weights` every backend loads a
    random-weight checkpoint of the model's architecture (autotune.checkpoints.dummy) and
    accuracy is switched off. `budget_s` (from --budget) overrides the space's budget.
    """
    if dummy_weights and endpoint is not None:
        raise SpaceError("--dummy-weights cannot apply to --endpoint: that server has its weights")
    notes: list[str] = []
    if endpoint is not None:
        space = space.for_endpoint()
    else:
        space, notes = space.runnable_here()
    if budget_s is not None:
        space = space.model_copy(update={"budget": budget_s})
    model_id = model if model is not None else space.resolve_path(space.model)
    # An endpoint already serves its model: nothing is loaded here, so nothing is downloaded.
    if dummy_weights:
        from autotune.checkpoints.dummy import REASON, dummy_checkpoint, without_accuracy

        space = without_accuracy(space)
        model_path = dummy_checkpoint(model_id, device=space.device)
        notes.append(f"{REASON} (checkpoint: {model_path})")
    else:
        model_path = model_id if endpoint is not None else resolve_model(model_id)
    loaded_evalset = load_evalset(evalset or space.resolve_path(space.evalset))
    name = study_name or space.name
    return StudyPlan(
        space=space,
        model=model_id,
        model_path=model_path,
        evalset=loaded_evalset,
        study_name=name,
        storage_url=storage_url or default_storage_url(name),
        endpoint=normalize_base_url(endpoint) if endpoint is not None else None,
        notes=notes,
        dummy_weights=dummy_weights,
        image_geometry=read_geometry(model_path).to_dict(),
    )


def study_attrs(plan: StudyPlan) -> dict[str, Any]:
    """What a study records about itself when it is created."""
    space = plan.space
    return {
        "space_name": space.name,
        "space_file": str(space.source) if space.source else None,
        "space": space.model_dump(mode="json"),
        "model": plan.model,
        "model_path": plan.model_path,
        "evalset": str(plan.evalset.path),
        "objective_metrics": [o.metric for o in space.objectives],
        "endpoint": plan.endpoint,
        # An endpoint study recommends request settings for that server, not a command.
        "deploy_target": None if plan.endpoint else space.deploy,
        "image_geometry": plan.image_geometry,
        "notes": plan.notes,
        "dummy_weights": plan.dummy_weights,
        "autotune_version": __version__,
        "schema_version": SCHEMA_VERSION,
    }
