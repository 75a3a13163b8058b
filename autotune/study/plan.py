"""Everything `autotune run` needs, resolved and checked before the database is touched."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from autotune import SCHEMA_VERSION, __version__
from autotune.accuracy.timed import TimedAccuracy, TimedPass, timed_accuracy
from autotune.backends import BACKENDS
from autotune.checkpoints.adapters import CANNOT_SERVE, Adapter
from autotune.checkpoints.geometry import read_geometry
from autotune.checkpoints.source import resolve_model
from autotune.client.chat import normalize_base_url
from autotune.engines.gpus import Gpu, visible_gpus
from autotune.engines.machine import engine_packages, this_machine
from autotune.engines.session import accuracy_batch_size
from autotune.errors import ModelError, SpaceError, StudyError, TrialFailure
from autotune.evalset.dataset import EvalSet, load_evalset
from autotune.params import TrialConfig
from autotune.records.machine import Machine
from autotune.records.stored import StudyRecord
from autotune.space import SearchSpace
from autotune.space.model import check_name
from autotune.space.narrowing import for_endpoint, for_gpus, runnable_here
from autotune.space.sampling import applies, unsupported_notes
from autotune.space.support import supported_choices
from autotune.study.store.storage import (
    check_several_writers,
    check_storage_url,
    default_storage_url,
)


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
    # The GPUs the run's launches are handed out from (autotune.engines.gpu_pool); none on the
    # CPU or for an endpoint. `workers`: how many trials run at once, one per GPU with --gpus.
    gpus: list[Gpu] = field(default_factory=list)
    workers: int = 1
    # This process's slot among them, from 0 (--worker): its confirmations' levels interleave
    # with the other workers' (autotune.accuracy.confirm).
    worker: int = 0
    # LoRA adapters served on the model (--adapter), the first one measured.
    adapters: list[Adapter] = field(default_factory=list)
    # Local folders of the model in a quantised layout, by weight_quant value, for engines
    # that serve such a checkpoint (LMDeploy's FP8); the ids export prints are the space's.
    quantized_paths: dict[str, str] = field(default_factory=dict)
    # Dummy weights: the accuracy pass a real study would run, timed, not judged
    # (autotune.accuracy.timed); None: a real pass, or none.
    timed_accuracy: TimedAccuracy | None = None
    # The machine this run measures on, and whether it may join a study measured on another
    # one as a comparison group of its own (--allow-other-machine; autotune.records.machine).
    machine: Machine = field(default_factory=Machine)
    allow_other_machine: bool = False

    def __post_init__(self) -> None:
        if self.machine.group is None:
            packages = engine_packages(self.space)
            self.machine = this_machine(self.gpus, packages, endpoint=self.endpoint)

    @property
    def group(self) -> str | None:
        """The comparison group this run's trials join."""
        return self.machine.group

    def machine_attrs(self) -> dict[str, Any]:
        """What each trial of this run records of its machine, as it starts."""
        return {"machine": self.machine.written()}

    @property
    def budget_s(self) -> float | None:
        return self.space.budget

    def timed_pass(self, config: TrialConfig, *, reference: bool) -> TimedPass | None:
        """The timed accuracy pass of a trial of `config`; None without dummy weights."""
        if self.timed_accuracy is None:
            return None
        return self.timed_accuracy.trial_pass(
            batch=accuracy_batch_size(self.space, config),
            max_new_tokens=config.max_new_tokens,
            reference=reference,
        )


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
    gpus: list[Gpu] | None = None,
    adapters: list[Adapter] | None = None,
    allow_other_machine: bool = False,
) -> StudyPlan:
    """Resolve the model and the eval set; every error here leaves no database behind.

    Everything a user can get wrong is checked here, before a study or its folder exists: the
    study name, the storage URL, the endpoint's URL and that it answers GET /v1/models, a GPU
    for `device: cuda`, the model and the eval set.

    With `endpoint` the trials measure that running server, and only request-side parameters
    are searched (autotune.space.narrowing.for_endpoint). With `dummy_weights` every backend loads a
    random-weight checkpoint of the model's architecture (autotune.checkpoints.dummy), and
    accuracy is timed, not judged (autotune.accuracy.timed). `budget_s` (from --budget)
    overrides the space's budget. `gpus` (from --gpus) runs one worker per GPU; without it
    the run is one worker over the GPUs this process sees. `adapters` (from --adapter) are
    served by every engine and measured; a backend that cannot serve them for this model is
    dropped with a note.
    `allow_other_machine` (--allow-other-machine) lets the run resume a study measured on
    another machine, as a comparison group of its own (autotune.study.start.opening).
    """
    if dummy_weights and endpoint is not None:
        raise SpaceError("--dummy-weights cannot apply to --endpoint: that server has its weights")
    name = _checked_study_name(study_name or space.name)
    # Before anything that depends on this machine: a space that cannot serve the adapter
    # fails the same everywhere.
    space, adapter_notes = _for_adapters(
        space, adapters or [], serving_endpoint=endpoint is not None
    )
    run_gpus = _run_gpus(space, gpus, endpoint)
    workers = len(gpus) if gpus else 1
    storage = storage_url or default_storage_url(name, several_writers=workers > 1)
    check_storage_url(storage, create=True)
    if workers > 1:
        check_several_writers(storage)
    base_url = _checked_endpoint_url(endpoint) if endpoint is not None else None
    if base_url is None:  # an endpoint runs on its own machine: our GPUs do not matter
        _check_device(space)
    notes: list[str] = list(adapter_notes)
    if endpoint is not None:
        space = for_endpoint(space)
    else:
        space, notes = runnable_here(space)
        space, gpu_notes = for_gpus(space, max(1, len(run_gpus)))
        notes += gpu_notes + unsupported_notes(space)
    if budget_s is not None:
        space = space.model_copy(update={"budget": budget_s})
    model_id = model if model is not None else space.resolve_path(space.model)
    # Before any checkpoint is built: a pool that cannot be built fails in seconds.
    loaded_evalset = load_evalset(evalset or space.resolve_path(space.evalset))
    # An endpoint already serves its model: nothing is loaded here, so nothing is downloaded.
    judged = space  # its floor and screening: what a dummy-weights study's timed pass stands for
    if dummy_weights:
        from autotune.checkpoints.dummy import REASON, dummy_checkpoint, without_accuracy

        space = without_accuracy(space)
        model_path = dummy_checkpoint(model_id, device=space.device)
        notes.append(f"{REASON} (checkpoint: {model_path})")
    else:
        model_path = model_id if endpoint is not None else resolve_model(model_id)
    quantized_paths = {}
    for layout in _served_checkpoint_layouts(space) if endpoint is None else []:
        quantized_paths[layout] = quantized_path(space, layout, model_id, dummy_weights)
    if base_url is not None:
        _check_endpoint_answers(base_url)
    timed = None
    if dummy_weights:
        timed = timed_accuracy(
            judged.constraints.accuracy,
            screening_items=judged.screening.items,
            evalset=loaded_evalset,
            model_path=model_path,
        )
        notes.append(timed.note())
    return StudyPlan(
        space=space,
        model=model_id,
        model_path=model_path,
        evalset=loaded_evalset,
        study_name=name,
        storage_url=storage,
        endpoint=base_url,
        notes=notes,
        dummy_weights=dummy_weights,
        image_geometry=read_geometry(model_path).to_dict(),
        gpus=run_gpus,
        workers=workers,
        adapters=list(adapters or []),
        quantized_paths=quantized_paths,
        timed_accuracy=timed,
        allow_other_machine=allow_other_machine,
    )


def _for_adapters(
    space: SearchSpace, adapters: list[Adapter], *, serving_endpoint: bool
) -> tuple[SearchSpace, list[str]]:
    """`space` without the backends that cannot serve a LoRA adapter of this model."""
    if not adapters or serving_endpoint:
        return space, []
    where = space.source or space.name
    if space.deploy in CANNOT_SERVE:
        raise SpaceError(
            f"--adapter: {where} deploys with {space.deploy}, and {CANNOT_SERVE[space.deploy]}; "
            "use a space with deploy: swift or vllm"
        )
    if space.reference_config().backend in CANNOT_SERVE:
        backend = space.reference_config().backend
        raise SpaceError(f"--adapter: the reference runs {backend}: {CANNOT_SERVE[backend]}")
    spec = space.params.get("backend")
    if spec is None or spec.choices is None:
        return space, []
    keep = [b for b in spec.choices if b not in CANNOT_SERVE]
    notes = [
        f"dropped from the search: backend {b} ({CANNOT_SERVE[b]})"
        for b in spec.choices
        if b in CANNOT_SERVE
    ]
    if not keep:
        raise SpaceError(f"--adapter: no backend of {where} can serve a LoRA adapter")
    params = {**space.params, "backend": spec.model_copy(update={"choices": keep})}
    return space.model_copy(update={"params": params}), notes


def _checkpoint_engines() -> tuple[str, ...]:
    """Engines that serve a quantised layout from its own checkpoint (LMDeploy's FP8)."""
    return tuple(name for name, b in BACKENDS.items() if b.loads_quantized_checkpoints)


def _served_checkpoint_layouts(space: SearchSpace) -> list[str]:
    """The weight_quant values this run may launch on an engine that serves a checkpoint in
    that layout (LMDeploy: FP8 weights are the -FP8 checkpoint)."""
    engines = _checkpoint_engines()
    configs = [space.reference_config()] + [
        space.candidate_config(c.name) for c in space.candidates
    ]
    layouts = {c.weight_quant for c in configs if c.backend in engines}
    backend = space.params.get("backend")
    quant = space.params.get("weight_quant")
    searched = set(backend.choices or []) if backend is not None else set()
    for engine in engines:
        on_it = {"backend": engine}
        if engine in searched and quant is not None and applies(space, "weight_quant", on_it):
            choices = quant.choices or []
            layouts |= set(supported_choices(engine, "weight_quant", choices, device=space.device))
    return sorted(layouts - {"none"})


def quantized_path(space: SearchSpace, layout: str, model_id: str, dummy_weights: bool) -> str:
    """The local folder of the model in `layout` (built for dummy weights, else the space's
    quantized_checkpoints entry, fetched like any model); one SpaceError line without one."""
    if dummy_weights:
        from autotune.checkpoints.dummy import dummy_checkpoint

        return dummy_checkpoint(model_id, device=space.device, layout=layout)
    checkpoint = space.quantized_checkpoints.get(layout)  # type: ignore[call-overload]
    if checkpoint is None:
        raise SpaceError(
            f"{space.source or space.name}: weight_quant {layout} on LMDeploy serves a "
            f"checkpoint in that layout; name it under quantized_checkpoints ({layout}: "
            "Qwen/Qwen3-VL-2B-Instruct-FP8), or use --dummy-weights"
        )
    return resolve_model(space.resolve_path(checkpoint))


def _run_gpus(space: SearchSpace, chosen: list[Gpu] | None, endpoint: str | None) -> list[Gpu]:
    if chosen:
        if endpoint is not None:
            raise SpaceError("--gpus cannot apply to --endpoint: that server runs on its own GPUs")
        if space.device == "cpu" and not all(gpu.fake for gpu in chosen):
            raise SpaceError(
                f"--gpus: {space.source or space.name} runs on the CPU (device: cpu); use a "
                "space with device: cuda or auto"
            )
        return chosen
    if endpoint is not None or space.device == "cpu":
        return []
    return visible_gpus()


def _checked_study_name(name: str) -> str:
    try:
        return check_name(name)
    except ValueError as exc:
        raise StudyError(f"study name: {exc}") from None


def _checked_endpoint_url(endpoint: str) -> str:
    try:
        return normalize_base_url(endpoint)
    except ValueError as exc:
        raise ModelError(f"--endpoint {exc}") from None


def _check_endpoint_answers(base_url: str) -> None:
    """A server that does not answer now would fail the reference trial into a new study."""
    from autotune.engines.endpoint import served_models

    try:
        served_models(base_url)
    except TrialFailure as failure:
        raise ModelError(
            f"--endpoint: {failure.reason}; start the server first, or check the URL"
        ) from None


def _check_device(space: SearchSpace) -> None:
    if space.device == "cuda" and gpu_count() == 0:
        raise SpaceError(
            f"{space.source or space.name}: device: cuda, but this machine has no NVIDIA GPU "
            "that the driver can see; use device: cpu (or auto), or run on a GPU machine"
        )


def gpu_count() -> int:
    """NVIDIA GPUs the driver sees; 0 when there is no driver, no NVML or no GPU.

    Asked through NVML, not torch: the study process never imports torch (its workers do).
    """
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: no usable GPU
        return 0


def study_attrs(plan: StudyPlan) -> StudyRecord:
    """What a study records about itself when it is created."""
    space = plan.space
    return StudyRecord.part(
        space_name=space.name,
        space_file=str(space.source) if space.source else None,
        space=space.model_dump(mode="json"),
        model=plan.model,
        model_path=plan.model_path,
        evalset=str(plan.evalset.path),
        objective_metrics=[o.metric for o in space.objectives],
        endpoint=plan.endpoint,
        # An endpoint study recommends request settings for that server, not a command.
        deploy_target=None if plan.endpoint else space.deploy,
        image_geometry=plan.image_geometry,
        notes=plan.notes,
        dummy_weights=plan.dummy_weights,
        adapters=[adapter.to_dict() for adapter in plan.adapters],
        # What `export` prints for a quantised layout (ids, not this machine's folders).
        quantized_checkpoints=dict(space.quantized_checkpoints),
        quantized_paths=plan.quantized_paths,
        autotune_version=__version__,
        schema_version=SCHEMA_VERSION,
    )


def with_checkpoint_for(plan: StudyPlan, config: TrialConfig) -> StudyPlan:
    """`plan` with the quantised checkpoint `config` needs (`autotune eval --param
    weight_quant=fp8` on LMDeploy, which the space itself may not search)."""
    layout = config.weight_quant
    if config.backend not in _checkpoint_engines() or layout in ("none", *plan.quantized_paths):
        return plan
    if plan.endpoint is not None:
        return plan
    path = quantized_path(plan.space, layout, plan.model, plan.dummy_weights)
    return dataclasses.replace(plan, quantized_paths={**plan.quantized_paths, layout: path})
