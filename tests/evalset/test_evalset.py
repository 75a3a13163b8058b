"""Evaluation sets: loader errors, the committed sets, and the synthetic generators."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from autotune.errors import EvalsetError
from autotune.evalset.dataset import EVALSETS_DIR, load_evalset, summary
from autotune.evalset.metrics import get_metric
from tools import synth
from tools.synth import SMOKE_GLYPHS

GOOD = {
    "id": "line-0001",
    "category": "text_line",
    "image": "images/a.png",
    "prompt": "Read the text in the image. Answer with the text only.",
    "answers": ["AB12CD"],
    "metric": "exact_match",
    "meta": {"font_px": 14},
}


def write_set(tmp_path: Path, lines: list[Any], *, images: tuple[str, ...] = ("a.png",)) -> Path:
    """Write items.jsonl (dicts as JSON, strings verbatim) and small PNG images."""
    (tmp_path / "images").mkdir(exist_ok=True)
    for name in images:
        Image.new("RGB", (40, 20), "white").save(tmp_path / "images" / name)
    text = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    path = tmp_path / "items.jsonl"
    path.write_text(text + "\n", encoding="utf-8")
    return path


def item(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


def load_error(path: Path) -> str:
    with pytest.raises(EvalsetError) as info:
        load_evalset(path)
    message = str(info.value)
    assert "\n" not in message  # the CLI prints it as one line
    return message


def test_loads_a_valid_set_from_folder_or_file(tmp_path: Path) -> None:
    path = write_set(tmp_path, [item(), item(id="line-0002", category="other", metric="cer")])
    for target in (tmp_path, path, str(path)):
        evalset = load_evalset(target)
        assert [i.id for i in evalset.items] == ["line-0001", "line-0002"]
    assert evalset.name == tmp_path.name
    assert summary(evalset) == {
        "name": tmp_path.name,
        "path": str(path),
        "items": 2,
        "categories": {"other": 1, "text_line": 1},
        "metrics": {"cer": 1, "exact_match": 1},
    }
    image = evalset.items[0].load_image()
    assert image.mode == "RGB" and image.size == (40, 20)
    assert evalset.items[0].image_path == tmp_path / "images" / "a.png"


def test_bad_json_names_file_and_line(tmp_path: Path) -> None:
    path = write_set(tmp_path, [item(), item(id="b"), '{"id": "c", "category": '])
    message = load_error(path)
    assert "items.jsonl" in message and "line 3" in message and "not valid JSON" in message


def test_blank_lines_are_skipped_but_counted(tmp_path: Path) -> None:
    path = write_set(tmp_path, [item(), "", item(id="b", metric="nope")])
    assert "line 3" in load_error(path)


def test_missing_image(tmp_path: Path) -> None:
    path = write_set(tmp_path, [item(), item(id="b", image="images/missing.png")])
    message = load_error(path)
    assert "line 2" in message and "images/missing.png" in message and "not found" in message


def test_unreadable_image(tmp_path: Path) -> None:
    path = write_set(tmp_path, [item(image="images/broken.png")])
    (tmp_path / "images" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    assert "cannot be decoded" in load_error(path)


def test_a_truncated_image_is_caught_when_the_set_is_loaded(tmp_path: Path) -> None:
    """Its header reads fine; only decoding every pixel finds the missing end."""
    path = write_set(tmp_path, [item(), item(id="b", image="images/cut.png")])
    whole = (tmp_path / "images" / "a.png").read_bytes()
    (tmp_path / "images" / "cut.png").write_bytes(whole[: len(whole) * 2 // 3])
    message = load_error(path)
    assert "line 2" in message and "images/cut.png" in message and "cannot be decoded" in message


def test_duplicate_id(tmp_path: Path) -> None:
    path = write_set(tmp_path, [item(), item(id="x"), item()])
    message = load_error(path)
    assert "line 3" in message and "duplicate id 'line-0001'" in message
    assert "first used on line 1" in message


def test_unknown_metric_suggests(tmp_path: Path) -> None:
    message = load_error(write_set(tmp_path, [item(metric="exact-match")]))
    assert "line 1" in message and "did you mean 'exact_match'" in message


def test_unknown_extra_metric(tmp_path: Path) -> None:
    message = load_error(write_set(tmp_path, [item(meta={"extra_metrics": ["cerr"]})]))
    assert "extra_metrics" in message and "did you mean 'cer'" in message


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({k: v for k, v in GOOD.items() if k != "answers"}, "missing field 'answers'"),
        (item(colour="red"), "unknown field 'colour'"),
        (item(answers=[]), "answers"),
        (item(answers=["ok", "  "]), "answers must be non-empty strings"),
        (item(id=""), "id"),
        (item(meta={"extra_metrics": "cer"}), "extra_metrics must be a list"),
        ([1, 2], "expected a JSON object"),
    ],
)
def test_malformed_items(tmp_path: Path, record: Any, expected: str) -> None:
    message = load_error(write_set(tmp_path, [record]))
    assert "line 1" in message and expected in message


def test_empty_file(tmp_path: Path) -> None:
    path = write_set(tmp_path, ["", "  "])
    assert "has no items" in load_error(path)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[" * 100_000, "nested too deeply"),  # json's parser recurses once per bracket
        ('{"a":' * 50_000, "nested too deeply"),
        ("1" * 5000, "not valid JSON"),  # more digits than Python turns into an int
    ],
)
def test_lines_json_cannot_parse_name_file_and_line(
    tmp_path: Path, line: str, expected: str
) -> None:
    message = load_error(write_set(tmp_path, [item(), line]))
    assert "items.jsonl, line 2" in message and expected in message


@pytest.mark.parametrize("image", ["/etc/passwd", "../a.png", "images/../../a.png", "..", "{abs}"])
def test_images_outside_the_sets_folder_are_refused(tmp_path: Path, image: str) -> None:
    # An existing image given by its absolute path is refused too: a set must travel whole.
    image = image.format(abs=tmp_path / "images" / "a.png")
    message = load_error(write_set(tmp_path, [item(), item(id="b", image=image)]))
    assert "line 2" in message and "outside the set's folder" in message


def test_images_may_use_dots_that_stay_inside(tmp_path: Path) -> None:
    path = write_set(tmp_path, [item(image="./images/../images/a.png")])
    assert load_evalset(path).items[0].image_path.is_file()


def test_unknown_name_lists_bundled_sets() -> None:
    with pytest.raises(EvalsetError, match=r"no evaluation set named 'nope'.*smoke"):
        load_evalset("nope")


# --- the committed sets ---------------------------------------------------------------------


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_smoke_set() -> None:
    evalset = load_evalset("smoke")
    info = summary(evalset)
    assert info["items"] >= 20
    assert set(info["categories"]) == {"text_line", "shapes"}
    assert folder_bytes(EVALSETS_DIR / "smoke") < 1_000_000
    for it in evalset.items:
        # One short answer per item keeps the tiny model's generations short.
        assert len(it.answers[0].split()) == 1
        # One canvas on the 32-pixel grid: nothing is resampled at full size, and 32 vision
        # tokens keep the reader's training on 2 CPU cores (issues 28 and 38).
        assert (it.meta["width"], it.meta["height"]) == (512, 64)
        if it.category == "text_line":
            # The recipe the reader learns: 2-4 glyphs of a 12-glyph alphabet, 24-80 px, one
            # per 64 px cell; at image max side 64 the print shrinks to 3-10 px, so how far a
            # line stays legible depends on its size.
            assert 2 <= len(it.answers[0]) <= 4 and set(it.answers[0]) <= set(SMOKE_GLYPHS)
            assert 24 <= it.meta["font_px"] <= 80
        else:  # a strip of 1-4 shapes, one per 64 px cell: count and colour questions
            assert 44 <= it.meta["min_object_px"] <= 56 and 1 <= len(it.meta["cells"]) <= 4
    categories = Counter(it.category for it in evalset.items)
    # Enough items for the sequential floor (max_drop 0.05) to pass a configuration that
    # answers as the reference (tools/make_pool.py grew the set from 80 to 240).
    assert categories == {"text_line": 192, "shapes": 48}


def test_ocr_caption_set() -> None:
    evalset = load_evalset("ocr-caption")
    info = summary(evalset)
    assert info["items"] >= 120
    assert len(info["categories"]) >= 5
    assert min(info["categories"].values()) >= 5
    assert folder_bytes(EVALSETS_DIR / "ocr-caption") < 25_000_000
    ocr = [i for i in evalset.items if i.category not in ("shapes", "photo")]
    sizes = {i.meta["font_px"] for i in ocr}
    assert min(sizes) <= 12 and max(sizes) >= 24  # a spread of font sizes


def perfect_answer(metric: str, answers: list[str]) -> str:
    # Set-valued metrics need every reference stated, each by its first alternative.
    if metric == "fact_recall":  # "purple|violet square|box" -> "purple square"
        return ", ".join(" ".join(p.split("|")[0] for p in ref.split(" ", 1)) for ref in answers)
    if metric == "keyword_recall":  # "cup|coffee" -> "cup"
        return ", ".join(ref.split("|")[0] for ref in answers)
    return answers[0]


@pytest.mark.parametrize("name", ["smoke", "ocr-caption"])
def test_committed_answers_score_perfectly(name: str) -> None:
    """Each item's own reference passes its metric, and its prompt is a synth prompt."""
    # A template's {placeholder} matches any filling; the rest must match word for word.
    templates = [v for k, v in vars(synth.base).items() if k.startswith("PROMPT_")]
    patterns = [
        re.compile(".+".join(re.escape(part) for part in re.split(r"\{\w+\}", t)) + "$")
        for t in templates
    ]
    for it in load_evalset(name).items:
        metric = get_metric(it.metric)
        assert metric(perfect_answer(it.metric, it.answers), it.answers) == 1.0, it.id
        assert any(p.match(it.prompt) for p in patterns), it.prompt
        for extra in it.meta.get("extra_metrics", []):
            assert get_metric(extra)(it.answers[0], it.answers) == 1.0, it.id


# --- generators -----------------------------------------------------------------------------


def test_generators_are_deterministic() -> None:
    for make in (synth.text_line, synth.document, synth.receipt, synth.shapes_scene):
        a, b = make(random.Random("t/1")), make(random.Random("t/1"))
        assert a.answers == b.answers and a.prompt == b.prompt
        assert a.image.tobytes() == b.image.tobytes()
        assert make(random.Random("t/2")).image.tobytes() != a.image.tobytes()


def test_text_line_knobs() -> None:
    it = synth.text_line(random.Random(3), content="code", length=7, font_px=12, canvas=(300, 90))
    assert len(it.answers[0]) == 7 and set(it.answers[0]) <= set(synth.SAFE_CHARS)
    assert it.image.size == (300, 90) and it.meta["font_px"] == 12
    assert it.prompt == synth.PROMPT_TEXT_LINE


def test_receipt_adds_up() -> None:
    for seed in range(5):
        it = synth.receipt(random.Random(seed), ask="total")
        lines = it.meta["lines"]
        amounts = [Decimal(line.split()[-1]) for line in lines if re.search(r"\dx\d", line)]
        tax = Decimal(next(line for line in lines if line.startswith("Tax")).split()[-1])
        assert sum(amounts) + tax == Decimal(it.answers[0]) == Decimal(it.meta["total"])


def test_document_field_answer_is_printed() -> None:
    it = synth.document(random.Random(5), question="field", n_lines=8)
    key = it.meta["key"]
    assert f'"{key}"' in it.prompt
    assert it.meta["fields"][key] == it.answers[0]
    assert 5 <= it.meta["n_lines"] <= 15


def test_shapes_answers_match_scene() -> None:
    for seed in range(10):
        it = synth.shapes_scene(random.Random(seed), question="count")
        what = re.search(r"How many (.+) are", it.prompt).group(1)
        objects = it.meta["objects"]
        if what == "shapes":
            expected = len(objects)
        elif what.endswith(" shapes"):
            expected = sum(o.startswith(what.split()[0] + " ") for o in objects)
        else:
            expected = sum(o.endswith(" " + what[:-1]) for o in objects)
        assert it.answers[0] == str(expected)


def test_bar_chart_value_is_labelled() -> None:
    it = synth.bar_chart(random.Random(1), ask="value")
    label = re.search(r'"(.+)"', it.prompt).group(1)
    assert it.meta["values"][label] == it.answers[0]
    assert it.metric == "relaxed_accuracy"


def test_photo_keywords() -> None:
    pytest.importorskip("skimage")
    it = synth.photo("chelsea")
    assert it.image.mode == "RGB" and max(it.image.size) <= 1024
    assert get_metric(it.metric)("A tabby cat looking at the camera.", it.answers) == 1.0


def test_chinese_line() -> None:
    it = synth.chinese_line(random.Random(2), n_chars=12)
    assert len(it.answers[0]) >= 12 and it.metric == "cer"
    assert all("\u4e00" <= ch <= "\u9fff" for ch in it.answers[0])


def test_a_truncated_image_is_caught_even_where_pil_was_told_to_tolerate_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Importing LMDeploy switches PIL's truncated-image tolerance on for the whole process."""
    from PIL import ImageFile

    monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", True)
    path = write_set(tmp_path, [item(image="images/cut.png")])
    noise = Image.frombytes("RGB", (64, 48), bytes(range(256)) * 36)
    noise.save(tmp_path / "images" / "full.png")
    whole = (tmp_path / "images" / "full.png").read_bytes()
    (tmp_path / "images" / "cut.png").write_bytes(whole[: len(whole) // 2])
    assert "cannot be decoded" in load_error(path)
    assert ImageFile.LOAD_TRUNCATED_IMAGES is True  # left as it was found


def test_line_separators_inside_a_json_string_are_text(tmp_path: Path) -> None:
    """JSON lines end at "\\n" only: a raw U+0085, U+2028 or U+2029 inside a string is valid
    JSON (str.splitlines cut the line there and the item was refused as not valid JSON)."""
    prompts = [f"Read it.{char}Answer with the text only." for char in "\u0085\u2028\u2029"]
    lines = [
        json.dumps(item(id=f"line-{i}", prompt=prompt), ensure_ascii=False)
        for i, prompt in enumerate(prompts)
    ]
    path = write_set(tmp_path, lines)
    assert [i.prompt for i in load_evalset(path).items] == prompts
    # Windows line ends load too; the line numbers of an error stay right.
    path.write_text("\r\n".join([*lines, '{"id": ']) + "\r\n", encoding="utf-8")
    assert "line 4" in load_error(path)


def test_a_path_that_is_no_file_is_named_for_what_it_is(tmp_path: Path) -> None:
    """Not "not found": a symbolic link loop, a dangling link, a FIFO (never waited on), a
    device and standard input each say what they are."""
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to(loop)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone.jsonl")
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    folder_with_fifo = tmp_path / "set"
    folder_with_fifo.mkdir()
    os.mkfifo(folder_with_fifo / "items.jsonl")
    expected = {
        loop: "is a symbolic link loop",
        dangling: f"is a symbolic link to {tmp_path / 'gone.jsonl'}, which does not exist",
        fifo: "is not a regular file but a FIFO (a named pipe)",
        folder_with_fifo: "is not a regular file but a FIFO (a named pipe)",
        Path("/dev/null"): "is not a regular file but a character device",
        tmp_path / "missing.jsonl": "not found",
    }
    for path, words in expected.items():
        assert words in load_error(path), path


def test_standard_input_as_an_evaluation_set_is_refused_at_once(tmp_path: Path) -> None:
    checked = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "evalset", "validate", "/dev/stdin"],
        stdin=subprocess.PIPE, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert checked.returncode != 0
    lines = checked.stderr.strip().splitlines()
    assert len(lines) == 1 and "/dev/stdin is not a regular file but a FIFO" in lines[0], lines
    assert "standard input or output" in lines[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("size", "prompt", "says"),
    [
        ((1, 10_000), "Read it.", "is 1x10000 px: its long side is 200 or more times"),
        ((64, 64), "x" * 1_000_000, "prompt: String should have at most 32768 characters"),
    ],
)
def test_validate_refuses_what_the_engines_cannot_take(
    tmp_path: Path, size: tuple[int, int], prompt: str, says: str
) -> None:
    """Both passed validate, then ended `autotune eval` in 'peer closed connection'."""
    (tmp_path / "images").mkdir()
    Image.new("RGB", size, "white").save(tmp_path / "images" / "a.png")
    item = {"id": "a", "category": "c", "image": "images/a.png", "prompt": prompt,
            "answers": ["x"], "metric": "exact_match"}  # fmt: skip
    (tmp_path / "items.jsonl").write_text(json.dumps(item) + "\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "autotune.cli", "evalset", "validate", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: ") and "line 1" in line and says in line, line
