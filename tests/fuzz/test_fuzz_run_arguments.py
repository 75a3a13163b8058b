"""Bad input to `autotune run`: study files, --gpus, candidates, images, adapters, passwords.

Over a thousand more invalid inputs, generated from random.Random(0) so that a failure repeats,
for what came after the first rounds (tests/fuzz/test_fuzz_inputs.py): journal and SQLite files that
are FIFOs, another program's database or no database at all, and folders no file can be made
in; `--gpus` values; candidates (in a space or an `--enqueue` file) that set a parameter their
backend cannot take; truncated images of every format; LoRA adapter folders; and storage URLs
whose password sits in the query string. Each case must end with a non-zero exit, one `error:`
line, no traceback, no file written or changed, no password in the output, and all of it within
CASE_TIMEOUT_S (a FIFO must never be waited on).
"""

from __future__ import annotations

import io
import json
import os
import random
import sqlite3
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from PIL import Image
from test_fuzz_inputs import (
    READERS,
    SEED,
    Case,
    Sandbox,
    base_space,
    check_all,
    closed_port,
    make_sandbox,
)

from autotune.evalset.dataset import strict_decoding
from autotune.params import BACKEND_PARAMS, PARAM_NAMES

RUN = ["run", "--space", "smoke"]


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    return make_sandbox(tmp_path, monkeypatch)


def junk(rng: random.Random, low: int = 1, high: int = 300) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randint(low, high)))


def identifier(rng: random.Random) -> str:
    return rng.choice(string.ascii_lowercase) + "".join(
        rng.choices(string.ascii_lowercase + string.digits + "_", k=rng.randint(0, 12))
    )


# --- study files ------------------------------------------------------------------------------

OPTUNA_LIKE = ["studies", "trials", "version_info", "trial_values"]


def storage_file_cases(inputs: Path, rng: random.Random) -> list[Case]:
    """Files that cannot hold a study, given as a journal path or a SQLite URL."""
    folder = inputs / "storage"
    folder.mkdir()
    targets: list[tuple[str, str, str]] = []  # (what, storage, expected words)
    for suffix, url in ((".journal", "{}"), (".db", "sqlite:///{}")):
        fifo = folder / f"fifo{suffix}"
        os.mkfifo(fifo)
        targets.append((f"a FIFO as {suffix}", url.format(fifo), "not a regular file"))
    for index in range(30):
        path = folder / f"not-a-journal-{index}.journal"
        kind = index % 3
        if kind == 0:
            path.write_bytes(junk(rng))
        elif kind == 1:  # JSON, but not one of Optuna's records
            record = {identifier(rng): rng.randint(0, 9) for _ in range(rng.randint(1, 3))}
            path.write_text(json.dumps(record) + "\n")
        else:
            path.write_text(identifier(rng) + "\n")
        if path.read_bytes().strip():
            targets.append((f"a journal that is not one #{index}", str(path), "journal"))
    for index in range(30):
        path = folder / f"not-sqlite-{index}.db"
        path.write_bytes(b"x" + junk(rng, 16))
        targets.append((f"a file that is not SQLite #{index}", f"sqlite:///{path}", "SQLite"))
    for index in range(40):
        path = folder / f"foreign-{index}.db"
        tables = {identifier(rng) for _ in range(rng.randint(1, 4))} - set(OPTUNA_LIKE)
        tables = tables or {"orders"}
        with sqlite3.connect(path) as db:
            for table in [*tables, *rng.sample(OPTUNA_LIKE, rng.randint(0, 2))]:
                db.execute(f'CREATE TABLE "{table}" (x)')
        targets.append(
            (f"another program's SQLite #{index}", f"sqlite:///{path}", "another program")
        )
    for where in ("/proc/autotune-fuzz.journal", "/sys/autotune-fuzz.journal"):
        targets.append((f"a journal in {where}", where, "cannot create"))
    targets.append(("a SQLite file in /proc", "sqlite:////proc/autotune-fuzz.db", "cannot create"))
    cases = []
    for what, storage, expect in targets:
        cases.append(Case(f"run --storage {what}", [*RUN, "--storage", storage], expect))
        for command in READERS[:3]:
            cases.append(Case(f"{command[0]} --storage {what}", [*command, "--storage", storage]))
    return cases


def test_files_that_cannot_hold_a_study(sandbox: Sandbox) -> None:
    cases = storage_file_cases(sandbox.inputs, random.Random(SEED))
    assert len(cases) >= 400
    check_all(cases, sandbox)


# --- --gpus -----------------------------------------------------------------------------------

# Characters str.isdigit() accepts that are not ASCII digits: other scripts, full-width,
# superscripts.
UNICODE_DIGITS = "٠١٢٣٤٥٦٧٨٩०१२३०１２３²³¹߀߁෦๐"


def gpu_specs(rng: random.Random, count: int) -> list[str]:
    specs = ["", " ", ",", "0,", ",0", "0,,1", "-1", "a", "all,0", "0,0", "1.5", "0x1", "+1"]
    specs += ["1 2", "0;1", "ALL ", "none", "99999", "1" * 40, "0,1,0", "\t", "0\n1", "½"]
    while len(specs) < count:
        kind = rng.randrange(4)
        if kind == 0:
            specs.append("".join(rng.choices(UNICODE_DIGITS, k=rng.randint(1, 3))))
        elif kind == 1:
            parts = [str(rng.randint(0, 7)) for _ in range(rng.randint(1, 3))]
            parts.insert(rng.randint(0, len(parts)), rng.choice(UNICODE_DIGITS))
            specs.append(",".join(parts))
        elif kind == 2:
            index = str(rng.randint(0, 7))
            specs.append(",".join([index, *[str(rng.randint(0, 7)) for _ in range(2)], index]))
        else:
            specs.append("".join(rng.choices(string.punctuation + string.ascii_letters, k=3)))
    return specs


def test_gpu_values(sandbox: Sandbox) -> None:
    specs = gpu_specs(random.Random(SEED), 120)
    cases = [Case(f"run --gpus {spec!r}", [*RUN, "--gpus", spec], "--gpus") for spec in specs]
    cases.append(Case("run --gpus= (empty)", [*RUN, "--gpus="], "--gpus"))
    check_all(cases, sandbox)


# --- candidates -------------------------------------------------------------------------------

# A value TrialConfig accepts for each parameter a backend may lack.
VALID_VALUE = {
    "kv_cache_fraction": [0.3, 0.5],
    "max_batch_size": [8, 64],
    "tensor_parallel": [2, 3],
    "compile_mode": ["default"],
    "weight_quant": ["fp8"],
    "kv_quant": ["int8", "fp8"],
    "prefix_cache": [True],
    "attn_implementation": ["eager"],
}


def foreign_candidates(rng: random.Random, count: int) -> Iterator[dict[str, Any]]:
    """Candidates that set a parameter their backend has no use for."""
    made = 0
    while made < count:
        backend = rng.choice(["transformers", "swift"])
        lacking = [
            name
            for name in PARAM_NAMES
            if name not in BACKEND_PARAMS[backend] and name in VALID_VALUE
        ]
        name = rng.choice(lacking)
        config: dict[str, Any] = {"backend": backend, name: rng.choice(VALID_VALUE[name])}
        if rng.random() < 0.5:
            config["batch_size"] = rng.choice([1, 2, 4])
        made += 1
        yield {"name": f"cand-{made}", "config": config}


def candidate_cases(inputs: Path, rng: random.Random) -> list[Case]:
    folder = inputs / "candidates"
    folder.mkdir()
    cases = []
    for index, candidate in enumerate(foreign_candidates(rng, 150)):
        entries = [{"name": "fine", "config": {"batch_size": 2}}, candidate]
        rng.shuffle(entries)
        enqueued = folder / f"enqueue-{index}.yaml"
        enqueued.write_text(yaml.safe_dump(entries))
        cases.append(
            Case(f"--enqueue {candidate['config']}", [*RUN, "--enqueue", str(enqueued)], "has no")
        )
        if index % 3 == 0:
            space = {**base_space(), "candidates": entries}
            path = folder / f"space-{index}.yaml"
            path.write_text(yaml.safe_dump(space))
            cases.append(
                Case(f"space candidate {candidate['config']}", ["run", "--space", str(path)])
            )
    fifo = folder / "fifo.yaml"
    os.mkfifo(fifo)
    cases.append(Case("--enqueue a FIFO", [*RUN, "--enqueue", str(fifo)], "regular file"))
    return cases


@pytest.mark.slow
def test_candidates_a_backend_cannot_take(sandbox: Sandbox) -> None:
    cases = candidate_cases(sandbox.inputs, random.Random(SEED))
    assert len(cases) >= 200
    check_all(cases, sandbox)


# --- evaluation-set images --------------------------------------------------------------------

FORMATS = {"PNG": ".png", "JPEG": ".jpg", "GIF": ".gif", "BMP": ".bmp", "WEBP": ".webp",
           "TIFF": ".tif"}  # fmt: skip
GOOD = {"category": "text_line", "prompt": "Read it.", "answers": ["AB"], "metric": "exact_match"}


def image_bytes(rng: random.Random, fmt: str) -> bytes:
    size = (rng.randint(16, 80), rng.randint(16, 60))
    pixels = bytes(rng.randrange(256) for _ in range(size[0] * size[1] * 3))
    buffer = io.BytesIO()
    Image.frombytes("RGB", size, pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def image_cases(inputs: Path, rng: random.Random) -> list[Case]:
    cases = []
    for index in range(210):
        folder = inputs / f"set-{index}"
        (folder / "images").mkdir(parents=True)
        fmt = list(FORMATS)[index % len(FORMATS)]
        good = folder / "images" / f"good{FORMATS[fmt]}"
        good.write_bytes(image_bytes(rng, fmt))
        data = image_bytes(rng, fmt)
        kind = index % 3
        if kind == 0:  # truncated part-way: the header and structure read fine
            bad = data[: max(8, int(len(data) * rng.uniform(0.2, 0.9)))]
        elif kind == 1:
            bad = b""
        else:  # the format's first bytes, then noise
            bad = data[:16] + junk(rng, 16, 200)
        (folder / "images" / f"bad{FORMATS[fmt]}").write_bytes(bad)
        lines = [
            {**GOOD, "id": "good", "image": f"images/good{FORMATS[fmt]}"},
            {**GOOD, "id": "bad", "image": f"images/bad{FORMATS[fmt]}"},
        ]
        (folder / "items.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
        what = f"a {['truncated', 'empty', 'garbled'][kind]} {fmt} image"
        cases.append(
            Case(f"evalset validate: {what}", ["evalset", "validate", str(folder)], "line 2")
        )
        if index % 5 == 0:
            cases.append(Case(f"run --evalset: {what}", [*RUN, "--evalset", str(folder)], "line 2"))
    fifo_set = inputs / "fifo-set"
    fifo_set.mkdir()
    os.mkfifo(fifo_set / "items.jsonl")
    cases.append(Case("items.jsonl is a FIFO", ["evalset", "validate", str(fifo_set)], "regular"))
    fifo_image = inputs / "fifo-image"
    (fifo_image / "images").mkdir(parents=True)
    os.mkfifo(fifo_image / "images" / "a.png")
    (fifo_image / "items.jsonl").write_text(
        json.dumps({**GOOD, "id": "a", "image": "images/a.png"})
    )
    cases.append(
        Case("an image that is a FIFO", ["evalset", "validate", str(fifo_image)], "regular")
    )
    return cases


@pytest.mark.slow
def test_images_that_cannot_be_decoded(sandbox: Sandbox) -> None:
    cases = image_cases(sandbox.inputs, random.Random(SEED))
    assert len(cases) >= 200
    check_all(cases, sandbox)


# --- LoRA adapters ----------------------------------------------------------------------------


def adapter_cases(inputs: Path, rng: random.Random) -> list[Case]:
    cases = []

    def folder(index: int, config: bytes | None, weights: bool = True) -> Path:
        path = inputs / f"adapter-{index}"
        path.mkdir()
        if config is not None:
            (path / "adapter_config.json").write_bytes(config)
        if weights:
            (path / "adapter_model.safetensors").write_bytes(b"\0" * 8)
        return path

    configs: list[tuple[str, bytes | None, bool]] = [
        ("no adapter_config.json", None, True),
        ("no weights", json.dumps({"peft_type": "LORA", "r": 8}).encode(), False),
        ("a JSON list", b"[1, 2]", True),
        ("not LoRA", json.dumps({"peft_type": "IA3", "r": 8}).encode(), True),
        (
            "rank_pattern a list",
            json.dumps({"peft_type": "LORA", "r": 8, "rank_pattern": [16]}).encode(),
            True,
        ),
        ("nested too deep", b"[" * 100_000, True),
    ]
    for rank in (0, -1, "8", True, 1.5, None):
        configs.append(
            (f"rank {rank!r}", json.dumps({"peft_type": "LORA", "r": rank}).encode(), True)
        )
    for index in range(40):
        configs.append((f"garbage config #{index}", junk(rng), True))
    for index, (what, config, weights) in enumerate(configs):
        path = folder(index, config, weights)
        cases.append(Case(f"--adapter: {what}", [*RUN, "--adapter", f"a={path}"], "--adapter"))
    fifo = inputs / "adapter-fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "adapter_config.json")
    cases.append(Case("--adapter: a FIFO config", [*RUN, "--adapter", f"a={fifo}"], "regular"))
    cases.append(Case("--adapter: a file", [*RUN, "--adapter", f"a={fifo / 'x'}"], "--adapter"))
    return cases


def test_adapter_folders(sandbox: Sandbox) -> None:
    cases = adapter_cases(sandbox.inputs, random.Random(SEED))
    assert len(cases) >= 50
    check_all(cases, sandbox)


# --- passwords --------------------------------------------------------------------------------


def password_cases(rng: random.Random) -> tuple[list[Case], tuple[str, ...]]:
    port = closed_port()
    cases, secrets = [], []
    keys = ["password", "PASSWORD", "sslpassword", "Password"]
    for index in range(60):
        secret = "Pw" + "".join(rng.choices(string.ascii_letters + string.digits, k=12)) + "x9"
        secrets.append(secret)
        key = keys[index % len(keys)]
        extra = rng.choice(["", "&sslmode=disable", "&connect_timeout=2", "&application_name=a"])
        if index % 5 == 4:
            url = f"postgresql+psycopg://u:{secret}@127.0.0.1:{port}/db"
        else:
            url = f"postgresql+psycopg://u@127.0.0.1:{port}/db?{key}={secret}{extra}"
        for command in READERS:
            cases.append(
                Case(f"{command[0]} with a password in the URL", [*command, "--storage", url])
            )
    return cases, tuple(secrets)


def test_a_password_in_the_query_is_never_printed(sandbox: Sandbox) -> None:
    cases, secrets = password_cases(random.Random(SEED))
    assert len(cases) >= 250
    check_all(cases, sandbox, secrets=secrets)


@pytest.mark.slow
def test_there_are_more_than_a_thousand_cases(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    folders = [tmp_path / name for name in ("a", "b", "c", "d")]
    for path in folders:
        path.mkdir()
    total = (
        len(storage_file_cases(folders[0], rng))
        + len(gpu_specs(rng, 120))
        + len(candidate_cases(folders[1], rng))
        + len(image_cases(folders[2], rng))
        + len(adapter_cases(folders[3], rng))
        + len(password_cases(rng)[0])
    )
    assert total >= 1000, total


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_generated_bad_image_is_really_undecodable(fmt: str) -> None:
    """The image cases are invalid by construction: PIL itself cannot decode them."""
    rng = random.Random(SEED)
    for _ in range(10):
        data = image_bytes(rng, fmt)
        for bad in (data[: int(len(data) * rng.uniform(0.2, 0.9))], b"", data[:16] + junk(rng, 16)):
            # Strict as the check is: an imported LMDeploy makes PIL tolerate truncation.
            with (
                strict_decoding(),
                pytest.raises(Exception),  # noqa: B017  (PIL raises many types)
                Image.open(io.BytesIO(bad)) as image,
            ):
                image.load()
