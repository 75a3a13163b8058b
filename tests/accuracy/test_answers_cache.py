"""The answers cache (autotune.accuracy.answers_cache): an entry is served only under its own
key, whole and unchanged; anything else is refused by name, and a killed writer leaves no
half-written entry."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.accuracy.answers_cache import AnswersCache, AnswersKey, model_digest
from autotune.evalset.dataset import EvalSet, load_evalset

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def evalset() -> EvalSet:
    return load_evalset(REPO / "evalsets" / "smoke")


def _key(**output: object) -> AnswersKey:
    return AnswersKey(
        model="m" * 16,
        evalset={"name": "smoke", "items": "i" * 16, "images": "g" * 16},
        output={"backend": "transformers", "image_max_side": None, **output},
        engine={"autotune": "0.1.0", "torch": "2.9"},
    )


def _answers(evalset: EvalSet, n: int) -> dict[str, str]:
    return {item_id: f"answer {k}" for k, item_id in enumerate(evalset.decision_order()[:n])}


def test_an_entry_is_served_under_its_key_and_only_grows(tmp_path: Path, evalset: EvalSet) -> None:
    cache = AnswersCache(tmp_path)
    key = _key()
    assert cache.read(key, evalset).answers == {}
    cache.write(key, _answers(evalset, 5))
    cache.write(key, dict(list(_answers(evalset, 8).items())[5:]))  # the next stage
    read = cache.read(key, evalset)
    assert read.refused is None and read.answers == _answers(evalset, 8)
    # Another output key is another entry: nothing is served across keys.
    assert cache.read(_key(image_max_side=256), evalset).answers == {}


def test_a_damaged_entry_is_refused_by_name(tmp_path: Path, evalset: EvalSet) -> None:
    cache = AnswersCache(tmp_path)
    key = _key()
    cache.write(key, _answers(evalset, 4))
    path = cache.path(key)
    entry = json.loads(path.read_text(encoding="utf-8"))
    first = next(iter(entry["answers"]))
    entry["answers"][first] = "edited"  # the checksum still says the old answers
    path.write_text(json.dumps(entry), encoding="utf-8")
    refused = cache.read(key, evalset)
    assert refused.answers == {} and refused.refused is not None
    assert str(path) in refused.refused and "checksum" in refused.refused
    path.write_text(path.read_text(encoding="utf-8")[:40], encoding="utf-8")  # torn
    assert "not JSON" in str(cache.read(key, evalset).refused)
    # Written again, the entry holds the new answers alone, not the refused ones.
    cache.write(key, _answers(evalset, 2))
    assert cache.read(key, evalset).answers == _answers(evalset, 2)


def test_an_entry_copied_from_another_key_is_refused(tmp_path: Path, evalset: EvalSet) -> None:
    cache = AnswersCache(tmp_path)
    other, key = _key(image_max_side=256), _key()
    cache.write(other, _answers(evalset, 4))
    cache.path(key).write_bytes(cache.path(other).read_bytes())  # forged under this key's name
    refused = cache.read(key, evalset).refused
    assert refused is not None and "its key names another output than this one" in refused


def test_an_entry_answering_items_the_set_lacks_is_refused(
    tmp_path: Path, evalset: EvalSet
) -> None:
    cache = AnswersCache(tmp_path)
    key = _key()
    cache.write(key, {**_answers(evalset, 2), "not-an-item": "x"})
    refused = cache.read(key, evalset).refused
    assert refused is not None and "1 items this set does not hold" in refused


_WRITER = """
import sys
from pathlib import Path
from autotune.accuracy.answers_cache import AnswersCache, AnswersKey
cache = AnswersCache(Path(sys.argv[1]))
key = AnswersKey("m", {"name": "s"}, {"backend": "transformers"}, {"autotune": "0"})
n = 0
print("writing", flush=True)
while True:
    n += 1
    cache.write(key, {f"item-{i}": "x" * 200 for i in range(n * 50)})
"""


@pytest.mark.slow  # a real process, killed while it writes
def test_a_writer_killed_mid_write_leaves_a_whole_entry_or_none(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, env=env, text=True
    )
    assert writer.stdout is not None and writer.stdout.readline().strip() == "writing"
    time.sleep(1.5)  # entries of tens to hundreds of kilobytes, written over and over
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    entries = list(tmp_path.glob("*.json"))
    assert len(entries) == 1
    entry = json.loads(entries[0].read_text(encoding="utf-8"))  # whole: it parses
    key = AnswersKey("m", {"name": "s"}, {"backend": "transformers"}, {"autotune": "0"})
    assert entry["key"] == key.to_dict() and len(entry["answers"]) % 50 == 0


def test_a_checkpoint_is_hashed_once_and_again_when_it_changes(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}", encoding="utf-8")
    weights = model / "model.safetensors"
    weights.write_bytes(b"\0" * 4096)
    folder = tmp_path / "answers"
    first = model_digest(model, folder)
    memo = json.loads((folder / "model-digests.json").read_text(encoding="utf-8"))
    assert set(memo) == {str(weights.resolve()), str((model / "config.json").resolve())}
    assert model_digest(model, folder) == first
    weights.write_bytes(b"\1" * 4096)
    assert model_digest(model, folder) != first
    assert model_digest(tmp_path / "no-such-model", folder) is None
