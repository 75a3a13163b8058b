"""Loading and validating evaluation sets.

A set is a JSONL file, one item per line, with image paths relative to the file::

    {"id": "line-0001", "category": "text_line", "image": "images/line-0001.png",
     "prompt": "Read the text in the image. Answer with the text only.",
     "answers": ["AB12CD"], "metric": "exact_match", "meta": {"font_px": 14}}

Every problem is reported as one `EvalsetError` line naming the file and the line number, so a
broken set fails before any model is loaded rather than halfway through a study.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from PIL import Image, ImageFile
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from autotune.errors import EvalsetError
from autotune.evalset.metrics import METRICS, unknown_metric_message
from autotune.evalset.paths import not_a_regular_file
from autotune.evalset.pools import ensure_pool, known_pools

REPO_ROOT = Path(__file__).resolve().parents[2]
EVALSETS_DIR = REPO_ROOT / "evalsets"
ITEMS_FILE = "items.jsonl"
# What the engines can take, checked by `evalset validate` and every load of a set, so an item
# fails there and not as a dropped connection in a trial. Qwen-VL's image processors
# (smart_resize) refuse an image whose long side is MAX_ASPECT_RATIO times its short side or
# more: a 1x10000 px image failed every request. A prompt is a question about its image;
# MAX_PROMPT_CHARS (about 8,000 tokens) is far past any the bundled sets ask and well inside
# the context every engine here starts with, next to the image's tokens and the answer (a
# 1 MB prompt made the server drop the connection).
MAX_ASPECT_RATIO = 200
MAX_PROMPT_CHARS = 32_768


class EvalItem(BaseModel):
    """One image, one prompt, the reference answers and the metric that scores them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, description="Unique within the set; names the item in results.")
    category: str = Field(min_length=1, description="Group for per-category accuracy.")
    image: str = Field(min_length=1, description="Image path, relative to the JSONL file.")
    prompt: str = Field(
        min_length=1, max_length=MAX_PROMPT_CHARS, description="Text sent with the image."
    )
    answers: list[str] = Field(min_length=1, description="Reference answers; the best counts.")
    metric: str = Field(description="Name of a registered metric (autotune.evalset.metrics).")
    meta: dict[str, Any] = Field(default_factory=dict, description="Free-form generator facts.")

    _base_dir: Path = PrivateAttr(default=Path("."))

    @field_validator("answers")
    @classmethod
    def _answers_not_blank(cls, answers: list[str]) -> list[str]:
        if any(not a.strip() for a in answers):
            raise ValueError("answers must be non-empty strings")
        return answers

    @field_validator("metric")
    @classmethod
    def _metric_registered(cls, name: str) -> str:
        if name not in METRICS:
            raise ValueError(unknown_metric_message(name))
        return name

    @field_validator("meta")
    @classmethod
    def _extra_metrics_registered(cls, meta: dict[str, Any]) -> dict[str, Any]:
        # Secondary metrics (e.g. 1 - CER beside exact match) are scored too, so they must exist.
        extra = meta.get("extra_metrics", [])
        if not isinstance(extra, list) or not all(isinstance(n, str) for n in extra):
            raise ValueError("extra_metrics must be a list of metric names")
        for name in extra:
            if name not in METRICS:
                raise ValueError(f"extra_metrics: {unknown_metric_message(name)}")
        return meta

    @property
    def image_path(self) -> Path:
        return self._base_dir / self.image

    def load_image(self) -> Image.Image:
        """The item's image as RGB pixels; an EvalsetError naming the item and its file when
        it cannot be decoded (it changed since the set was loaded)."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # what PIL skips: the decode says what counts
                with Image.open(self.image_path) as img:
                    return img.convert("RGB")
        except Exception as exc:  # PIL raises many unrelated types for a corrupt file
            raise EvalsetError(
                f"item {self.id!r}: image {self.image_path} cannot be decoded: {exc}"
            ) from None


class EvalSet(BaseModel):
    """A loaded, validated evaluation set."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Set name: its folder under evalsets/, or the file's stem.")
    path: Path = Field(description="The JSONL file the items came from.")
    items: list[EvalItem] = Field(description="Items in file order.")

    def __len__(self) -> int:
        return len(self.items)

    def balanced_ids(self) -> list[str]:
        """Every item id, drawn round-robin over the categories (each shuffled with a fixed
        seed): any prefix is a fair mix. Load tests cycle this order, so a short workload is
        not all one category, and a screening subset represents every category."""
        by_category: dict[str, list[str]] = defaultdict(list)
        for item in self.items:
            by_category[item.category].append(item.id)
        rng = random.Random(0)
        queues = []
        for name in sorted(by_category):
            ids = by_category[name][:]
            rng.shuffle(ids)
            queues.append(ids)
        ordered: list[str] = []
        while any(queues):
            for queue in queues:
                if queue:
                    ordered.append(queue.pop())
        return ordered

    def decision_order(self) -> list[str]:
        """Every item id in the order the accuracy floor asks for them: each category
        shuffled with a fixed seed, then merged so that every prefix holds each category in
        its share of the set (a stage of 40 items of a 4:1 set is 32 and 8). Shuffled so that
        the paired differences arrive as a random sample, which the floor's confidence
        sequence assumes; fixed so that every trial answers the same items first."""
        by_category: dict[str, list[str]] = defaultdict(list)
        for item in self.items:
            by_category[item.category].append(item.id)
        rng = random.Random(f"decision-order/{self.name}")
        keyed: list[tuple[float, str, str]] = []
        for name in sorted(by_category):
            ids = sorted(by_category[name])
            rng.shuffle(ids)
            keyed += [((rank + 0.5) / len(ids), name, item) for rank, item in enumerate(ids)]
        return [item for _, _, item in sorted(keyed)]

    def argument(self) -> str:
        """How `--evalset` names this set: a bundled set or a pool by its name (a command
        shown to a user reads as they would type it), any other by its file."""
        if self.path.parent.name == self.name:
            bundled = self.path.resolve() == (EVALSETS_DIR / self.name / ITEMS_FILE).resolve()
            if bundled or self.name in known_pools():
                return self.name
        return str(self.path)


def available_evalsets() -> list[str]:
    """Names of the bundled sets (folders of evalsets/ that hold an items.jsonl)."""
    if not EVALSETS_DIR.is_dir():
        return []
    return sorted(p.parent.name for p in EVALSETS_DIR.glob(f"*/{ITEMS_FILE}"))


def resolve_evalset(path_or_name: str | Path) -> tuple[str, Path]:
    """The set's name and JSONL path for a bundled name, a folder or a file."""
    path = Path(path_or_name).expanduser()
    if path.is_dir():
        return path.resolve().name, path / ITEMS_FILE
    if path.is_file():
        name = path.resolve().parent.name if path.name == ITEMS_FILE else path.stem
        return name, path
    text = str(path_or_name)
    if os.path.lexists(path):  # there, but neither a folder nor a file: say what it is
        raise EvalsetError(
            f"evaluation set {text} {not_a_regular_file(path)}; give a folder holding "
            f"{ITEMS_FILE} or a .jsonl file"
        )
    if "/" not in text and "\\" not in text and not text.endswith(".jsonl"):
        bundled = EVALSETS_DIR / text / ITEMS_FILE
        if bundled.is_file():
            return text, bundled
        if text in known_pools():
            return text, ensure_pool(text) / ITEMS_FILE
        raise EvalsetError(
            f"no evaluation set named {text!r}; bundled sets: "
            f"{', '.join(available_evalsets() + list(known_pools())) or 'none'} (or give a "
            "folder or a .jsonl file)"
        )
    raise EvalsetError(f"evaluation set {text} not found")


def _describe(error: ValidationError) -> str:
    problems = []
    for err in error.errors():
        field = ".".join(str(part) for part in err["loc"])
        if err["type"] == "missing":
            problems.append(f"missing field {field!r}")
        elif err["type"] == "extra_forbidden":
            allowed = ", ".join(EvalItem.model_fields)
            problems.append(f"unknown field {field!r} (allowed: {allowed})")
        else:
            message = err["msg"].removeprefix("Value error, ")
            problems.append(f"{field}: {message}")
    return "; ".join(problems)


def _outside_folder(image: str) -> bool:
    """Whether an image path leaves the set's folder: absolute, or `..` past its top.

    A set is a folder that can be copied or shared whole; an image elsewhere would be read from
    whatever that path holds on the machine that runs it. Judged on the text of the path, so a
    symbolic link inside the folder stays allowed.
    """
    if os.path.isabs(image):
        return True
    normalised = os.path.normpath(image)
    return normalised == ".." or normalised.startswith(".." + os.sep)


def _check_image(item: EvalItem) -> str | None:
    if _outside_folder(item.image):
        return (
            f"image {item.image!r} is outside the set's folder; give a path relative to the "
            "JSONL file, inside its folder"
        )
    if not item.image_path.exists():
        return f"image {item.image!r} not found (looked for {item.image_path})"
    if not item.image_path.is_file():
        return f"image {item.image!r} is not a regular file (a folder, FIFO or device)"
    try:
        # PIL warns about what it skips in a damaged file; the decode below says what counts.
        with warnings.catch_warnings(), strict_decoding():
            warnings.simplefilter("ignore")
            with Image.open(item.image_path) as img:
                # Every pixel: a truncated file passes a structure check, then fails a trial.
                img.load()
                width, height = img.size
    except Exception as exc:  # PIL raises many unrelated types for a corrupt file
        return f"image {item.image!r} cannot be decoded: {exc}"
    if max(width, height) >= MAX_ASPECT_RATIO * min(width, height):
        return (
            f"image {item.image!r} is {width}x{height} px: its long side is "
            f"{MAX_ASPECT_RATIO} or more times its short side, which the model's image "
            "processor refuses; crop or pad it"
        )
    return None


@contextlib.contextmanager
def strict_decoding() -> Iterator[None]:
    """PIL's truncated-image tolerance off while checking: LMDeploy (and ModelScope) switch
    it on for the whole process when imported, and a truncated file would then pass."""
    before = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        yield
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = before


def _parse_line(line: str, where: str) -> Any:
    """One JSONL line as JSON; an EvalsetError naming the file and line when it is not."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise EvalsetError(f"{where}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    except (RecursionError, MemoryError):
        # json's parser recurses once per [ or {: a deep enough line exhausts the stack.
        raise EvalsetError(f"{where}: not valid JSON (nested too deeply)") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise EvalsetError(f"{where}: not valid JSON ({exc})") from None


def load_evalset(path_or_name: str | Path) -> EvalSet:
    """Load and validate a set: a bundled name, a folder holding items.jsonl, or a JSONL file.

    Raises:
        EvalsetError: the set is missing, empty or malformed; the message names the file and
            line.
    """
    name, path = resolve_evalset(path_or_name)
    problem = not_a_regular_file(path)
    if problem is not None and os.path.lexists(path):
        # Reading a FIFO would wait for a writer forever.
        raise EvalsetError(f"evaluation set {path} {problem}")
    try:
        # "\n" only: str.splitlines also splits at U+0085, U+2028 and U+2029, which are
        # valid inside a JSON string (a "\r" before the "\n" is JSON whitespace).
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalsetError(f"cannot read evaluation set {path}: {exc}") from exc
    items: list[EvalItem] = []
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        record = _parse_line(line, where)
        if not isinstance(record, dict):
            raise EvalsetError(f"{where}: expected a JSON object, got {type(record).__name__}")
        try:
            item = EvalItem.model_validate(record)
        except ValidationError as exc:
            raise EvalsetError(f"{where}: {_describe(exc)}") from None
        except (RecursionError, MemoryError):
            raise EvalsetError(f"{where}: a value is nested too deeply") from None
        if item.id in first_line:
            raise EvalsetError(
                f"{where}: duplicate id {item.id!r} (first used on line {first_line[item.id]})"
            )
        first_line[item.id] = number
        item._base_dir = path.parent
        problem = _check_image(item)
        if problem:
            raise EvalsetError(f"{where}: {problem}")
        items.append(item)
    if not items:
        raise EvalsetError(f"evaluation set {path} has no items")
    return EvalSet(name=name, path=path, items=items)


def summary(evalset: EvalSet) -> dict[str, Any]:
    """Name, path, item count and items per category and per metric."""
    return {
        "name": evalset.name,
        "path": str(evalset.path),
        "items": len(evalset.items),
        "categories": dict(sorted(Counter(i.category for i in evalset.items).items())),
        "metrics": dict(sorted(Counter(i.metric for i in evalset.items).items())),
    }
