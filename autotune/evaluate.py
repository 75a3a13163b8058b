"""`autotune eval`: score one configuration without a study, with the code a trial uses."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from autotune.engines.measurement import measure_once
from autotune.errors import AutotuneError, SpaceError, did_you_mean
from autotune.params import (
    BACKEND_PARAMS,
    PARAM_NAMES,
    SAMPLING_PARAMS,
    TrialConfig,
    no_effect_message,
)
from autotune.space import SearchSpace
from autotune.space.availability import missing_reason
from autotune.space.support import config_problems
from autotune.study import StudyPlan
from autotune.study.plan import with_checkpoint_for

# What --param may set: the searched parameters, and the sampling seed (a TrialConfig field the
# space's reference may set too).
OVERRIDABLE: tuple[str, ...] = (*PARAM_NAMES, "seed")

# Values a backend has no use for, reset when --param changes the backend away from the
# reference's: kept, they would be recorded as if they had applied.
_BACKEND_ONLY = ("kv_cache_fraction", "max_batch_size")


def parse_overrides(pairs: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """`name=value` pairs; values parse as YAML scalars (null, true, 256, 0.7, bfloat16).

    `None` reads as null too, the spelling a Python user reaches for; lowercase `none` stays
    a word, since `compile_mode`, `weight_quant` and `kv_quant` take it as a value.
    """
    overrides: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise AutotuneError(
                f"--param {pair!r}: write it as name=value, e.g. image_max_side=256"
            )
        if name not in OVERRIDABLE:
            raise AutotuneError(
                f"--param {name!r}: unknown parameter; {did_you_mean(name, OVERRIDABLE)}"
                f"known: {', '.join(OVERRIDABLE)}"
            )
        overrides[name] = _scalar(raw)
    return overrides


def _scalar(raw: str) -> Any:
    """A value as YAML reads it; the text itself when YAML cannot (TrialConfig judges it)."""
    if not raw.strip() or raw.strip() == "None":
        return None
    try:
        return yaml.safe_load(raw)
    except (yaml.YAMLError, RecursionError, MemoryError, ValueError):
        # ValueError: an integer of more digits than Python converts.
        return raw


def configured(
    reference: TrialConfig, overrides: dict[str, Any], *, device: str = "auto"
) -> TrialConfig:
    """The reference with `overrides` applied; sampling knobs drop when greedy.

    Raises:
        SpaceError: a value is not allowed, or the configuration's backend has no such
            parameter (it would be recorded without having had any effect).
    """
    values = reference.model_dump()
    values.update(overrides)
    if not values.get("do_sample"):
        for name in SAMPLING_PARAMS:
            if name not in overrides:
                values[name] = None
    backend = values.get("backend")
    for name in _BACKEND_ONLY:
        if name not in overrides and name not in BACKEND_PARAMS.get(str(backend), frozenset()):
            values[name] = None
    try:
        config = TrialConfig(**values)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"]) or "configuration"
        message = str(error["msg"]).removeprefix("Value error, ")
        if where == "image_max_side":  # 'full' and 'none' are what users try for full size
            message += "; full size is image_max_side=null (or None)"
        raise SpaceError(f"--param {where}: {message}") from None
    _check_backend_has(config.backend, overrides)
    for problem in config_problems(config.model_dump(), device=device):
        raise SpaceError(f"--param {problem}")
    return config


def _check_backend_has(backend: str, overrides: dict[str, Any]) -> None:
    """Each override is one the backend has, and can run here: a kernel that is not installed
    (flash_attention_2 without flash-attn) is named with what to install, not found as a
    server that exited."""
    for name, value in overrides.items():
        problem = no_effect_message(backend, [name]) or missing_reason(name, value)
        if problem is not None:
            raise SpaceError(f"--param {name}: {problem}")


def with_timeout(space: SearchSpace, timeout_s: float | None) -> SearchSpace:
    """`space` with `trial_timeout_s` set to `timeout_s` (None: as it is), refused where the
    load test may run past it: every measurement would then time out after the whole wait."""
    if timeout_s is None:
        return space
    caps = space.workload.max_warmup_s + space.workload.max_measure_s
    if timeout_s <= caps:
        raise SpaceError(
            f"--timeout-s {timeout_s:g}: the load test alone may take {caps:g} s "
            "(workload.max_warmup_s + workload.max_measure_s); give more"
        )
    return space.model_copy(update={"trial_timeout_s": timeout_s})


@dataclass(frozen=True)
class EvalResult:
    """What `autotune eval` measured of one configuration; `--json` prints it as it reads."""

    model: str
    evalset: str
    items: int
    config: dict[str, Any]
    accuracy: float | None  # None: dummy weights (random answers), not measured
    accuracy_by_category: dict[str, float]
    predictions: dict[str, str]
    figures: dict[str, float]
    dummy_weights: bool
    adapters: list[dict[str, Any]]
    memory_source: str
    environment: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def evaluate(
    plan: StudyPlan,
    overrides: dict[str, Any],
    *,
    endpoint: str | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> EvalResult:
    """Measure the space's reference (with overrides) once; the result, JSON-able.
    `on_phase` is shown each phase and, in the accuracy pass, the items answered so far."""
    config = configured(plan.space.reference_config(), overrides, device=plan.space.device)
    plan = with_checkpoint_for(plan, config)
    m = measure_once(
        plan.space,
        config,
        model_path=plan.model_path,
        evalset=plan.evalset,
        on_phase=on_phase,
        endpoint=endpoint,
        image_geometry=plan.image_geometry,
        measure_accuracy=not plan.dummy_weights,  # random weights answer noise
        adapters=plan.adapters,
        quantized_paths=plan.quantized_paths,
        count_answers=True,
    )
    accuracy = m.accuracy
    return EvalResult(
        model=plan.model,
        evalset=plan.evalset.name,
        items=len(plan.evalset.items),
        config=config.model_dump(),
        accuracy=accuracy.accuracy if accuracy else None,
        accuracy_by_category=accuracy.by_category if accuracy else {},
        predictions=m.predictions,
        figures=m.figures,
        dummy_weights=plan.dummy_weights,
        adapters=[adapter.to_dict() for adapter in plan.adapters],
        memory_source=m.memory_source,
        environment=m.environment,
    )


class EvalProgress:
    """`autotune eval`'s progress on stderr: each phase with the seconds since the start, and
    a line every `every_s` of silence, so a run on a busy machine that takes minutes (a
    server's start-up, a load test still settling) is seen to be alive, never mistaken for
    hung. A context manager: its heartbeat thread stops on exit."""

    def __init__(self, limit_s: float, every_s: float = 30.0, stream: TextIO | None = None):
        self.limit_s = limit_s
        self.every_s = every_s
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.monotonic()
        self.phase = "starting"
        self._last_line = self.started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> EvalProgress:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def __call__(self, phase: str) -> None:
        self.phase = phase
        self._line(f"eval: {phase}")

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.every_s)):
            if time.monotonic() - self._last_line >= self.every_s:
                self._line(f"eval: still {self.phase}")

    def _line(self, text: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._last_line = now
            print(
                f"{text} ({now - self.started:.0f} s; it times out after "
                f"{self.limit_s:.0f} s: --timeout-s)",
                file=self.stream,
                flush=True,
            )
