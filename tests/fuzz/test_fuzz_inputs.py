"""Seeded fuzzing of what users write and type: every bad input ends as one `error:` line.

Over a thousand invalid inputs, generated from random.Random(0) so that a failure repeats: space
files (one field of the smoke space changed at a time), evaluation-set JSONL files, option values,
storage URLs and study names. Each must end with a non-zero exit, exactly one non-empty stderr
line that starts with `error: `, no traceback, and no file written or changed under the working
folder. The CLI runs in-process (click's CliRunner): a process per case would take minutes.

Every input is invalid by construction; should one still get through, the study loop and the
measurement are replaced by a stub that fails the case, so no real study ever starts.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import signal
import socket
import string
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from PIL import Image

from autotune.cli import main
from autotune.space import load_space
from autotune.space.model import NAME_PATTERN

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "tiny-qwen3-vl"
SMOKE_SET = REPO / "evalsets" / "smoke"
SEED = 0
NAN, INF = math.nan, math.inf
DELETE = object()  # a mutation that removes the field


@dataclass(frozen=True)
class Case:
    """One bad input: what it is, the command line that reads it, and what the error says."""

    description: str
    args: list[str]
    expect: str | None = None


@dataclass(frozen=True)
class Sandbox:
    work: Path  # the working folder: nothing may appear in it
    inputs: Path  # the files the cases read: nothing may change in it either


class ReachedRealWork(AssertionError):
    """A case got past every check: it would have started a study or a measurement."""


def _must_not_run(*args: Any, **kwargs: Any) -> Any:
    raise ReachedRealWork("an invalid input reached the study loop or a measurement")


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    return make_sandbox(tmp_path, monkeypatch)


def make_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sandbox:
    """A working folder and an inputs folder, with every way into real work stubbed out."""
    import autotune.evaluate
    import autotune.study
    import autotune.study.plan

    work, inputs = tmp_path / "work", tmp_path / "inputs"
    work.mkdir()
    inputs.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no case may wait for the network
    monkeypatch.setattr(autotune.study, "run_study", _must_not_run)
    monkeypatch.setattr(autotune.evaluate, "measure_once", _must_not_run)
    # device: cuda is refused where NVML sees no GPU: make every machine look like that one.
    monkeypatch.setattr(autotune.study.plan, "gpu_count", lambda: 0)
    return Sandbox(work=work, inputs=inputs)


# --- checking -------------------------------------------------------------------------------


def snapshot(*roots: Path) -> dict[str, tuple[int, int] | None]:
    """Every entry under `roots`: files with size and modification time, folders by name."""
    entries: dict[str, tuple[int, int] | None] = {}
    for root in roots:
        for folder, dirs, names in os.walk(root):
            for name in dirs:
                entries[os.path.join(folder, name)] = None
            for name in names:
                info = os.lstat(os.path.join(folder, name))
                entries[os.path.join(folder, name)] = (info.st_size, info.st_mtime_ns)
    return entries


def judge(result: Result, case: Case) -> list[str]:
    """What is wrong with how the CLI answered a bad input ([] when it is right)."""
    problems = []
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        problems.append(f"raised {type(result.exception).__name__}: {result.exception}")
    if result.exit_code == 0:
        problems.append("exit status 0")
    lines = result.stderr.splitlines()
    if len(lines) != 1 or not lines[0].startswith("error: ") or not lines[0][7:].strip():
        problems.append(f"stderr is {len(lines)} lines, not one `error:` line")
    if "Traceback" in result.output:
        problems.append("a traceback was printed")
    if case.expect is not None and (not lines or case.expect not in lines[0]):
        problems.append(f"the error does not mention {case.expect!r}")
    return problems


# No case may wait: on a FIFO, a lock, the network.
# A bound that catches a hang (a FIFO opened for reading, a lock waited on forever), never a
# slow machine: a case takes well under a second on idle cores, and a first case that imports
# the engines took 21 s beside other CPU-bound work (issue 40). Speed is bench/'s to measure.
CASE_TIMEOUT_S = 300


class CaseTimedOut(Exception):
    """A case that waited instead of refusing at once."""


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise CaseTimedOut(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_all(cases: list[Case], sandbox: Sandbox, *, secrets: tuple[str, ...] = ()) -> None:
    """Every case refused in one line, in time, writing nothing, warning nothing and printing
    none of `secrets`."""
    runner = CliRunner()
    failures = []
    for case in cases:
        before = snapshot(sandbox.work, sandbox.inputs)
        # A warning is one more stderr line in a real process (here pytest would catch it).
        with deadline(CASE_TIMEOUT_S), warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            result = runner.invoke(main, case.args, catch_exceptions=True)
        after = snapshot(sandbox.work, sandbox.inputs)
        problems = judge(result, case)
        if warned:
            problems.append(f"warned: {warned[0].message}")
        if after != before:
            changed = sorted(k for k in before | after if before.get(k) != after.get(k))
            problems.append(f"files written or changed: {changed[:5]}")
        leaked = [secret for secret in secrets if secret in result.output]
        if leaked:
            problems.append(f"printed the password {leaked[0]!r}")
        if problems:
            failures.append(
                f"{case.description}: {'; '.join(problems)} "
                f"(exit {result.exit_code}, stderr {result.stderr[:300]!r})"
            )
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(
        failures[:40]
    )


# --- study names ----------------------------------------------------------------------------

FORBIDDEN_IN_NAMES = "/\\ \n\t\r:*?\"'<>|$`;&%#@!+=,(){}[]^~\x00\x7fé"


def bad_names(rng: random.Random, count: int) -> list[str]:
    """Names that NAME_PATTERN refuses: fixed classics, then random ones of each kind."""
    names = ["", ".", "..", "../up", "a/b", "a\\b", "a\nb", "name\n", "-x", ".hidden", "a b"]
    names += ["x" * 129, "é", "a:b", "/abs", "a\x00b", "\t", " a", "a ", "studies/x", "~"]
    while len(names) < count:
        stem = "".join(
            rng.choices(string.ascii_letters + string.digits + "._-", k=rng.randint(1, 20))
        )
        stem = rng.choice(string.ascii_letters) + stem
        kind = rng.randrange(3)
        if kind == 0:
            at = rng.randint(0, len(stem))
            name = stem[:at] + rng.choice(FORBIDDEN_IN_NAMES) + stem[at:]
        elif kind == 1:
            name = rng.choice(".-_") + stem
        else:
            name = stem + rng.choice(string.ascii_letters) * (129 - len(stem) + rng.randint(0, 50))
        names.append(name)
    assert not any(NAME_PATTERN.fullmatch(name) for name in names)
    return names


# --- space files ----------------------------------------------------------------------------


def base_space() -> dict[str, Any]:
    """The smoke space with absolute model and eval-set paths: valid, and runnable anywhere."""
    data = yaml.safe_load((REPO / "search_spaces" / "smoke.yaml").read_text(encoding="utf-8"))
    data.update(name="fuzz", model=str(MODEL), evalset=str(SMOKE_SET))
    return data


def mutated(base: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = copy.deepcopy(base)
    target = data
    for key in path[:-1]:
        target = target.setdefault(key, {}) if isinstance(target, dict) else target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


WRONG_TYPES: list[Any] = ["text", [], {}, [1, 2]]

# Integer fields: (path, lowest allowed, highest allowed or None, may be null).
INT_FIELDS: list[tuple[tuple[str, ...], int, int | None, bool]] = [
    (("trials",), 1, None, False),
    (("seed",), 0, 2**32 - 1, False),
    (("workload", "warmup_requests"), 1, None, False),
    (("workload", "max_requests"), 16, None, False),  # two passes of the smoke's 8 requests
    (("workload", "accuracy_batch_size"), 1, 1024, True),
    (("screening", "items"), 0, None, False),
    (("sampler", "n_startup_trials"), 1, None, True),
    (("launches", "trials_per_launch"), 1, None, False),
    (("launches", "max_repeated_proposals"), 1, None, False),
    (("launches", "random_launches"), 0, None, False),
]

# Float fields: (path, bad values besides the common ones, may be null).
FLOAT_FIELDS: list[tuple[tuple[str, ...], list[float], bool]] = [
    (("trial_timeout_s",), [0, -1], False),
    (("workload", "max_measure_s"), [0, -0.5], False),
    (("workload", "target_ci_rel"), [0, 1, 1.5], False),
    (("workload", "ci_confidence"), [0.5, 1, 0.2], False),
    (("workload", "request_rate_per_s"), [0, -2], True),
    (("workload", "startup_timeout_s"), [0, -10], False),
    (("constraints", "accuracy", "max_drop"), [-0.1, 1.1], False),
    (("constraints", "accuracy", "min"), [-0.1, 2], False),
    (("constraints", "accuracy", "confidence"), [0.5, 1.0], False),
    (("constraints", "memory_budget_mib"), [0, -1], True),
    (("constraints", "latency_slo_ms"), [0, -5], True),
    (("screening", "confidence"), [0.5, 1.0, 0], False),
]


def int_field_values(low: int, high: int | None, nullable: bool) -> list[Any]:
    values: list[Any] = [low - 1, low - 1000, low + 0.5, NAN, INF, -INF, True, False, -(10**30)]
    values += WRONG_TYPES
    if high is not None:
        values += [high + 1, 10**30, 2**70]
    if not nullable:
        values.append(None)
    return values


def float_field_values(extra: list[float], nullable: bool) -> list[Any]:
    values: list[Any] = [*extra, NAN, INF, -INF, True, 10**400, *WRONG_TYPES]
    return values if nullable else [*values, None]


# One value each parameter may take, for specs that must fail for another reason.
VALID_VALUE: dict[str, Any] = {
    "backend": "transformers",
    "dtype": "float32",
    "attn_implementation": "sdpa",
    "compile_mode": "none",
    "kv_cache_fraction": 0.5,
    "max_batch_size": 4,
    "image_max_side": 256,
    "batch_size": 2,
    "do_sample": True,
    "temperature": 0.5,
    "top_k": 5,
    "top_p": 0.9,
    "repetition_penalty": 1.0,
    "max_new_tokens": 16,
}

# Values each parameter refuses (in `choices`, in `when`, in the reference).
BAD_VALUES: dict[str, list[Any]] = {
    "backend": ["tensorrt", "", True, 1, None, "Transformers"],
    "dtype": ["fp8", "bf16", True, None, 16],
    "attn_implementation": ["flash", "", True, None],
    "compile_mode": ["fast", None, True, 0],
    "kv_cache_fraction": [0, 1, 1.5, -0.5, NAN, INF, True, "half"],
    "max_batch_size": [0, 5000, True, "x", 1.5, NAN],
    "image_max_side": [8, 20000, True, "big", 1.5, INF],
    "batch_size": [0, 2000, True, None, "x", 2.5],
    "do_sample": ["true", "false", "yes", 1, 0, None, "True"],
    "temperature": [0, 2.5, True, "hot", NAN, -1],
    "top_k": [0, 2000, True, 2.5],
    "top_p": [0, 1.5, True, "x"],
    "repetition_penalty": [0.1, 3.0, True, None, NAN],
    "max_new_tokens": [0, 40000, True, None, 1.5],
}

# Numeric parameters: (valid low, valid high, low out of range, high out of range).
RANGES: dict[str, tuple[float, float, float, float]] = {
    "kv_cache_fraction": (0.5, 0.9, 0.0, 1.0),
    "max_batch_size": (1, 64, 0, 5000),
    "image_max_side": (64, 512, 16, 20000),
    "batch_size": (1, 8, 0, 2000),
    "temperature": (0.2, 1.0, 0.0, 2.5),
    "top_k": (5, 50, 0, 2000),
    "top_p": (0.5, 1.0, 0.0, 1.5),
    "repetition_penalty": (1.0, 1.2, 0.1, 3.0),
    "max_new_tokens": (8, 64, 0, 40000),
}
PARAMS = list(VALID_VALUE)


def param_specs(name: str) -> Iterator[tuple[str, Any]]:
    """(what, spec) pairs that params.<name> must refuse."""
    valid = VALID_VALUE[name]
    low, high, bad_low, bad_high = RANGES.get(name, (0, 1, 0, 1))
    later = PARAMS[PARAMS.index(name) + 1] if name != PARAMS[-1] else name
    yield "an empty spec", {}
    yield "empty choices", {"choices": []}
    yield "low without high", {"low": low}
    yield "high without low", {"high": high}
    yield "choices and a range", {"choices": [valid], "low": low, "high": high}
    yield "step on choices", {"choices": [valid], "step": 1}
    yield "log on choices", {"choices": [valid], "log": True}
    yield "choices not a list", {"choices": "abc"}
    yield "choices a mapping", {"choices": {"a": 1}}
    yield "a list instead of a spec", [valid]
    yield "a scalar instead of a spec", "text"
    yield "null spec", None
    yield "an unknown key", {"choices": [valid], "bogus": 1}
    yield "when not a mapping", {"choices": [valid], "when": "x"}
    yield "when on an unknown parameter", {"choices": [valid], "when": {"nope": [1]}}
    yield "when on a later parameter", {"choices": [valid], "when": {later: [VALID_VALUE[later]]}}
    yield "when values not a list", {"choices": [valid], "when": {"backend": "transformers"}}
    yield "a dict as a choice", {"choices": [valid, {}]}
    yield "a list as a choice", {"choices": [valid, [1]]}
    yield "low above high", {"low": high + 1, "high": low}
    yield "NaN low", {"low": NAN, "high": high}
    yield "infinite high", {"low": low, "high": INF}
    yield "-inf low", {"low": -INF, "high": high}
    yield "huge int high", {"low": low, "high": 10**400}
    yield "zero step", {"low": low, "high": high, "step": 0}
    yield "negative step", {"low": low, "high": high, "step": -1}
    yield "step and log", {"low": max(low, 0.1), "high": high, "step": 0.1, "log": True}
    yield "log from zero", {"low": 0, "high": high, "log": True}
    yield "log not a boolean", {"low": low, "high": high, "log": "maybe"}
    yield "text bound", {"low": "abc", "high": high}
    yield "boolean bound", {"low": True, "high": high}
    if name in RANGES:
        yield "low out of range", {"low": bad_low, "high": high}
        yield "high out of range", {"low": low, "high": bad_high}
    else:
        yield "a numeric range", {"low": 0, "high": 1}
    if name in ("max_batch_size", "image_max_side", "batch_size", "top_k", "max_new_tokens"):
        yield "a fractional step", {"low": low, "high": high, "step": 0.5}
    for bad in BAD_VALUES[name]:
        yield f"bad choice {bad!r}", {"choices": [valid, bad]}


def space_mutations(rng: random.Random) -> Iterator[tuple[str, dict[str, Any]]]:
    """(description, space) pairs: the base space with one field made invalid."""
    base = base_space()

    def one(path: tuple[Any, ...], value: Any) -> tuple[str, dict[str, Any]]:
        shown = "removed" if value is DELETE else repr(value)[:80]
        return f"space {'.'.join(map(str, path))} = {shown}", mutated(base, path, value)

    yield one(("model",), DELETE)
    for name in bad_names(rng, 30):
        yield one(("name",), name)
    for value in [5, True, None, [], {}]:
        yield one(("name",), value)
    for value in [5, [], {}, True, None, "/nonexistent/model-dir", "./missing-model", ""]:
        yield one(("model",), value)
    for value in [5, [], True, None, "/nonexistent/set", "no-such-set", "./missing-set"]:
        yield one(("evalset",), value)
    for value in [5, [], {}, True, None]:
        yield one(("description",), value)
    for value in ["gpu", "CUDA", "", 1, True, None, [], "cuda"]:
        yield one(("device",), value)
    for value in ["tensorrt", "", 1, True, None, ["swift"], "Swift"]:
        yield one(("deploy",), value)
    for value in [0, -1, "abc", "1x", "", True, NAN, INF, [], {}, "0s", "-5m", "1h-", "nan"]:
        yield one(("budget",), value)
    for path, low, high, nullable in INT_FIELDS:
        for value in int_field_values(low, high, nullable):
            yield one(path, value)
    yield one(("workload", "requests"), 10**30)  # more than max_requests allows
    for path, extra, nullable in FLOAT_FIELDS:
        for value in float_field_values(extra, nullable):
            yield one(path, value)
    for value in ["relative-ish", 1, None]:
        yield one(("constraints", "accuracy", "mode"), value)
    for value in ["t-test", None, 5]:
        yield one(("constraints", "accuracy", "test"), value)
    for value in ["maybe", 5, None, []]:
        yield one(("constraints", "accuracy", "enabled"), value)
    objectives: list[Any] = [
        [],
        "x",
        [{}],
        [{"metric": "nope"}],
        [{"metric": 5}],
        [{"metric": "throughput_output_tokens_per_s", "direction": "up"}],
        [{"metric": "e2e_latency_p95_ms", "extra": 1}],
        None,
        ["throughput_output_tokens_per_s"],
    ]
    for value in objectives:
        yield one(("objectives",), value)
    for section in ("workload", "constraints", "screening", "sampler", "launches"):
        yield one((section,), "not a mapping")
        yield one((section, "bogus_key"), 1)
    yield one(("constraints", "accuracy", "bogus_key"), 1)
    for param, values in BAD_VALUES.items():
        for value in values:
            yield one(("reference", param), value)
    for param in ("temperature", "top_k", "top_p"):  # the reference is greedy
        yield one(("reference", param), VALID_VALUE[param])
    for value in [-1, 2**32, 2**70, 1180591620717411303424, True, "x", 1.5, NAN]:
        yield one(("reference", "seed"), value)
    for key in ["foo", "temprature", "max_tokens", "Seed"]:
        yield one(("reference", key), 1)
    for value in ["x", [], 5, None]:
        yield one(("reference",), value)
    candidates: list[Any] = [
        "x",
        [{"name": "", "config": {}}],
        [{"name": "a" * 81, "config": {}}],
        [{"config": {}}],
        [{"name": "a"}],
        [{"name": "a", "config": {}}, {"name": "a", "config": {}}],
        [{"name": "a", "config": {"batch_size": 0}}],
        [{"name": "a", "config": {"do_sample": "yes"}}],
        [{"name": "a", "config": {"backend": "tensorrt"}}],
        [{"name": "a", "config": {"nope": 1}}],
        [{"name": "a", "config": {}, "extra": 1}],
        [{"name": "a", "config": {"seed": 2**32}}],
        [{"name": 5, "config": {}}],
        [{"name": "a", "config": {"temperature": 0.5}}],
    ]
    for value in candidates:
        yield one(("candidates",), value)
    for param in PARAMS:
        for what, spec in param_specs(param):
            data = mutated(base, ("params", param), spec)
            yield f"space params.{param}: {what}", data
        earlier = PARAMS[: PARAMS.index(param)]
        for other in rng.sample(earlier, min(2, len(earlier))):
            bad = rng.choice(BAD_VALUES[other])
            spec = {"choices": [VALID_VALUE[param]], "when": {other: [bad]}}
            yield one(("params", param), spec)
    unknown_params = ["temprature", "seed", "max_tokens", "Backend", "kv_cache", "", "top-k"]
    unknown_params += ["".join(rng.choices(string.ascii_lowercase + "_", k=8)) for _ in range(8)]
    for name in unknown_params:
        yield one(("params", name), {"choices": [1]})
    yield one(("params",), "not a mapping")
    yield one(("params",), [1, 2])
    engine_args: list[Any] = [
        {"vllm": {"max-num-seqs=256": True}},
        {"lmdeploy": {"max-batch-size=1": True}},
        {"swift": {"max_batch_size=2": True}},
        {"vllm": {"--max-num-seqs=4": 1}},
        {"vllm": {"a b": 1}},
        {"vllm": {"x;y": 1}},
        {"lmdeploy": {"": 1}},
        {"tensorrt": {"x": 1}},
        {"vllm": {"max-num-seqs": 4}},
        {"vllm": {"port": 1}},
        {"swift": {"max_batch_size": 2}},
        {"lmdeploy": {"tp": None}},
        {"vllm": "x"},
        {"vllm": {"x": ["--max-num-seqs", "3"]}},
        {"vllm": {"x": "--enforce-eager"}},
        {"lmdeploy": {"session-len": 1, "session_len": 2}},
        "x",
    ]
    for value in engine_args:
        yield one(("engine_args",), value)
    fields = set(base_space()) | {"description", "budget", "candidates", "engine_args"}
    unknown = ["trails", "param", "Model", "devices", "budgets", "source"]
    while len(unknown) < 30:
        key = "".join(rng.choices(string.ascii_lowercase + "_", k=rng.randint(3, 12)))
        if key not in fields and key not in unknown and key not in ("sampler", "launches"):
            unknown.append(key)
    for key in unknown:
        yield one((key,), 1)


def space_texts(rng: random.Random) -> Iterator[tuple[str, bytes]]:
    """Whole files that are no space at all: not a mapping, not YAML, nested too deep."""
    texts = {
        "an empty file": "",
        "only a comment": "# nothing\n",
        "a null document": "null\n",
        "a list": "- a\n- b\n",
        "a number": "42\n",
        "a string": "just text\n",
        "20000 nested [": "[" * 20000,
        "20000 nested {": "{a: " * 20000,
        "5000 closed [ ]": "[" * 5000 + "]" * 5000,
        "params: [unclosed": "model: x\nparams: [unclosed\n",
        "a tab indent": "model: x\n\tdevice: cpu\n",
        "a python tag": "!!python/object/apply:os.system ['true']\n",
        "an undefined alias": "model: *nope\n",
        "an integer of 5000 digits": "trials: " + "9" * 5000 + "\n",
        "a NUL character": "model: x\x00\n",
        "two documents": "model: a\n---\nmodel: b\n",
        "an unhashable key": "? [a]\n: b\n",
        "a deep value": "model: x\nreference: " + "[" * 3000 + "]" * 3000 + "\n",
    }
    for what, text in texts.items():
        yield what, text.encode("utf-8")
    yield "bytes that are not UTF-8", b"\xff\xfe\x00garbage"
    for index in range(20):
        size = rng.randint(1, 300)
        yield f"binary garbage #{index}", bytes(rng.randrange(256) for _ in range(size))
    for index in range(10):
        size = rng.randint(1, 200)
        yield f"printable garbage #{index}", "".join(rng.choices(string.printable, k=size)).encode()


def space_cases(inputs: Path, rng: random.Random) -> list[Case]:
    folder = inputs / "spaces"
    folder.mkdir()
    cases = []
    for index, (what, data) in enumerate(space_mutations(rng)):
        path = folder / f"case-{index:04d}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        cases.append(Case(what, ["run", "--space", str(path)]))
    for index, (what, content) in enumerate(space_texts(rng)):
        path = folder / f"text-{index:04d}.yaml"
        path.write_bytes(content)
        cases.append(Case(f"space file: {what}", ["run", "--space", str(path)]))
    # Things at the --space path that are no file: each says what it is instead.
    (folder / "d.yaml").mkdir()
    (folder / "loop.yaml").symlink_to(folder / "loop.yaml")
    (folder / "dangling.yaml").symlink_to(folder / "nothing-here.yaml")
    odd_paths = {
        "a folder named d.yaml": (str(folder / "d.yaml"), "is a folder"),
        "a symbolic link loop": (str(folder / "loop.yaml"), "symbolic link loop"),
        "a dangling symbolic link": (str(folder / "dangling.yaml"), "does not exist"),
        "/dev/null": ("/dev/null", "is not a regular file"),
        "a missing file": (str(folder / "missing.yaml"), "does not exist"),
        "an unknown space name": ("no-such-space", "unknown space"),
        "an empty --space": ("", "no space given"),
        "a NUL in the path": ("a\x00b.yaml", "not a valid path"),
    }
    for what, (value, expect) in odd_paths.items():
        for command in (["run"], ["eval"]):
            cases.append(
                Case(f"--space {what} ({command[0]})", [*command, "--space", value], expect)
            )
    return cases


def test_the_checker_sees_what_it_must(tmp_path: Path) -> None:
    """A success, a multi-line answer and a written file: each must count as a failure."""
    before = snapshot(tmp_path)
    (tmp_path / "studies").mkdir()
    assert snapshot(tmp_path) != before
    runner = CliRunner()
    assert "exit status 0" in judge(runner.invoke(main, ["--version"]), Case("ok", []))
    usage = runner.invoke(main, ["evalset"])  # a bare group prints its help on purpose
    assert any("not one `error:` line" in p for p in judge(usage, Case("help", [])))
    one = runner.invoke(main, ["run", "--space", "no-such-space"])
    assert judge(one, Case("one line", [], "unknown space")) == []
    assert judge(one, Case("wrong words", [], "something else")) != []


def test_the_base_space_is_valid(tmp_path: Path) -> None:
    """Each space case changes one field of this space: it must itself be accepted."""
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(base_space()), encoding="utf-8")
    space = load_space(str(path))
    assert space.name == "fuzz" and space.reference_config().batch_size == 1


@pytest.mark.slow
def test_bad_space_files(sandbox: Sandbox) -> None:
    cases = space_cases(sandbox.inputs, random.Random(SEED))
    assert len(cases) >= 700
    check_all(cases, sandbox)


# --- evaluation sets ------------------------------------------------------------------------

GOOD_ITEM = {
    "id": "good",
    "category": "text_line",
    "image": "images/a.png",
    "prompt": "Read the text.",
    "answers": ["AB12"],
    "metric": "exact_match",
}


def bad_item_lines(image: Path) -> Iterator[tuple[str, str]]:
    """(description, JSONL line) pairs that no set may hold."""
    raw = {
        "an unclosed object": "{",
        "an unclosed list": "[",
        "plain text": "not json",
        "single quotes": "{'id': 'a'}",
        "a trailing comma": '{"id": "a",}',
        "NaN": "NaN",
        "a list": "[]",
        "a number": "1",
        "a string": '"str"',
        "null": "null",
        "true": "true",
        "100000 nested [": "[" * 100_000,
        "50000 nested objects": '{"a":' * 50_000,
        "3000 closed [ ]": "[" * 3000 + "]" * 3000,
        "an integer of 5000 digits": "1" * 5000,
        "an empty object": "{}",
        "a NUL": "\x00",
        "a truncated item": json.dumps(GOOD_ITEM)[:-5],
    }
    yield from raw.items()
    for field in GOOD_ITEM:
        item = {key: value for key, value in GOOD_ITEM.items() if key != field}
        yield f"no {field}", json.dumps(item)
    wrong: dict[str, list[Any]] = {
        "id": ["", 5, None, []],
        "category": ["", 5, None],
        "image": ["", 5, None],
        "prompt": ["", 5, None],
        "answers": ["x", [], [""], ["  "], [1], None, {}],
        "metric": ["nope", "", 5, None],
        "meta": [
            "x",
            [],
            {"extra_metrics": "cer"},
            {"extra_metrics": ["nope"]},
            {"extra_metrics": [1]},
        ],
        "foo": [1],
        "ID": ["a"],
    }
    for field, values in wrong.items():
        for value in values:
            yield f"{field} = {value!r}", json.dumps({**GOOD_ITEM, field: value})
    images = {
        "an absolute image path": str(image),
        "an image in /etc": "/etc/passwd",
        "an image in the parent folder": "../a.png",
        "an image that climbs out": "images/../../a.png",
        "the parent folder as image": "..",
        "a missing image": "images/none.png",
        "an image that is no image": "images/bad.png",
        "a folder as image": "images",
        "a folder with a slash as image": "images/",
    }
    for what, path in images.items():
        yield what, json.dumps({**GOOD_ITEM, "image": path})


def evalset_cases(inputs: Path, rng: random.Random) -> list[Case]:
    folder = inputs / "evalset"
    (folder / "images").mkdir(parents=True)
    Image.new("RGB", (16, 8), "white").save(folder / "images" / "a.png")
    (folder / "images" / "bad.png").write_bytes(b"not a png")
    good_lines = [json.dumps({**GOOD_ITEM, "id": f"good-{i}"}) for i in range(4)]
    cases = []
    for index, (what, line) in enumerate(bad_item_lines(folder / "images" / "a.png")):
        for repeat in range(2):  # the same bad line after a random number of good ones
            before = good_lines[: rng.randint(0, 3)]
            blanks = [""] * rng.randint(0, 1)
            lines = [*before, *blanks, line, good_lines[3]]
            path = folder / f"case-{index:03d}-{repeat}.jsonl"
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            where = f"line {len(before) + len(blanks) + 1}"
            cases.append(Case(f"eval set: {what}", ["evalset", "validate", str(path)], where))
        if index % 4 == 0:  # through `run` too: the set is checked before any study
            cases.append(
                Case(
                    f"run --evalset: {what}",
                    ["run", "--space", "smoke", "--evalset", str(path)],
                    where,
                )
            )
    duplicate = folder / "duplicate.jsonl"
    duplicate.write_text(json.dumps(GOOD_ITEM) + "\n" + json.dumps(GOOD_ITEM) + "\n")
    cases.append(
        Case("eval set: a duplicate id", ["evalset", "validate", str(duplicate)], "line 2")
    )
    whole = {
        "an empty file": b"",
        "only blank lines": b"\n\n  \n",
        "bytes that are not UTF-8": b"\xff\xfe\x00\x01",
    }
    for index in range(10):
        whole[f"binary garbage #{index}"] = bytes(
            rng.randrange(256) for _ in range(rng.randint(1, 200))
        )
    for what, content in whole.items():
        path = folder / f"whole-{len(cases):03d}.jsonl"
        path.write_bytes(content)
        cases.append(Case(f"eval set: {what}", ["evalset", "validate", str(path)]))
    (inputs / "no-items").mkdir()
    for what, value in {
        "a missing file": str(folder / "missing.jsonl"),
        "a folder without items.jsonl": str(inputs / "no-items"),
        "an unknown set name": "no-such-set",
        "an empty name": "",
    }.items():
        cases.append(Case(f"eval set: {what}", ["evalset", "validate", value]))
        cases.append(Case(f"eval set: {what} (show)", ["evalset", "show", value]))
    return cases


def test_bad_evaluation_sets(sandbox: Sandbox) -> None:
    cases = evalset_cases(sandbox.inputs, random.Random(SEED))
    assert len(cases) >= 150
    check_all(cases, sandbox)


# --- option values --------------------------------------------------------------------------


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def option_cases(inputs: Path, rng: random.Random) -> list[Case]:
    run = ["run", "--space", "smoke"]
    cases = []

    def add(what: str, args: list[str], expect: str | None = None) -> None:
        cases.append(Case(what, args, expect))

    for value in ["0", "-1", "-100", "abc", "1.5", "", "1e3", "nan"]:
        add(f"run --trials {value!r}", [*run, "--trials", value], "--trials")
    for value in ["0", "0.5", "-1", "nan", "NaN", "inf", "-inf", "Infinity", "abc", "", "1e999"]:
        add(f"run --timeout {value!r}", [*run, "--timeout", value], "--timeout")
    for value in ["0", "-5", "nan", "inf", "abc", "1x", "", "0s", "1h-", "1e999", "-1m", "m"]:
        add(f"run --budget {value!r}", [*run, "--budget", value], "--budget")
    for value in ["nan", "inf", "-inf", "-0.1", "1.5", "abc", ""]:
        add(f"verify --tolerance {value!r}", ["verify", "--tolerance", value], "--tolerance")
    for value in ["0", "-1", "65536", "abc", ""]:
        add(f"export --port {value!r}", ["export", "--port", value], "--port")
    for value in ["-1", "65536", "abc", "1.5"]:
        add(f"dashboard --port {value!r}", ["dashboard", "--port", value], "--port")
    for value in ["bogus", "YAML", ""]:
        add(f"export --format {value!r}", ["export", "--format", value], "--format")
        add(f"verify --format {value!r}", ["verify", "--format", value], "--format")
    for value in ["abc", "1.5", ""]:
        add(f"export --trial {value!r}", ["export", "--trial", value], "--trial")
    add("report --out a folder", ["report", "--out", str(inputs)], "--out")
    for command in (["run"], ["eval"], ["report"], ["evalset", "validate"]):
        add(f"{' '.join(command)} without its required value", list(command))
    for command in ("run", "best", "export", "verify", "dashboard", "report", "eval"):
        add(f"{command} --bogus", [command, "--bogus"], "--bogus")
    add("an unknown command", ["runn"], "runn")
    add("an unknown evalset command", ["evalset", "check", "x"], "check")
    bad_params = [
        "nope=1",
        "batch_size",
        "=1",
        "batch_size=0",
        "batch_size=abc",
        "batch_size=true",
        "batch_size=2.5",
        "temperature=0.5",
        "top_k=5",
        "do_sample=maybe",
        "do_sample=1",
        "do_sample=null",
        "seed=-1",
        "seed=4294967296",
        "seed=true",
        "kv_cache_fraction=0.5",
        "max_batch_size=4",
        "backend=tensorrt",
        "dtype=fp8",
        "image_max_side=8",
        "repetition_penalty=.nan",
        "repetition_penalty=.inf",
        "max_new_tokens=0",
        "batch_size=" + "[" * 5000,
        "batch_size=" + "1" * 5000,
        "batch_size=!!python/name:os.system",
        "backend={}",
    ]
    for value in bad_params:
        # On the in-process transformers engine, which lacks the server knobs (the smoke
        # space's own reference runs swift deploy, which has max_batch_size).
        add(
            f"eval --param {value[:40]!r}",
            ["eval", "--space", "smoke", "--param", "backend=transformers", "--param", value],
        )
    pairs = [
        ("backend=lmdeploy", "attn_implementation=eager"),
        ("backend=swift", "compile_mode=default"),
    ]
    for first, second in pairs:
        add(
            f"eval --param {first} {second}",
            ["eval", "--space", "smoke", "--param", first, "--param", second],
            "backend has no",
        )
    port = closed_port()
    endpoints = [
        ("ftp://127.0.0.1", "http"),
        ("http://", "no host"),
        ("https://", "no host"),
        ("http://:8000", "no host"),
        ("http://127.0.0.1:99999", "port"),
        ("http://127.0.0.1:0", "port"),
        ("http://127.0.0.1:abc", "port"),
        ("a b", "URL"),
        ("http://127.0.0.1:1\nx", "URL"),
        (f"http://127.0.0.1:{port}", "GET /v1/models"),
        (f"127.0.0.1:{port}/v1", "GET /v1/models"),
    ]
    for url, expect in endpoints:
        add(f"run --endpoint {url!r}", [*run, "--endpoint", url], expect)
        add(f"eval --endpoint {url!r}", ["eval", "--space", "smoke", "--endpoint", url], expect)
    add("verify --endpoint ftp://", ["verify", "--endpoint", "ftp://127.0.0.1"], "http")
    add(
        "--dummy-weights with --endpoint",
        [*run, "--dummy-weights", "--endpoint", f"http://127.0.0.1:{port}"],
        "--dummy-weights",
    )
    for value in ["./no/such/model", "/nonexistent/model", str(inputs)]:
        add(f"run --model {value!r}", [*run, "--model", value])
        add(f"eval --model {value!r}", ["eval", "--space", "smoke", "--model", value])
    for value in ["no-such-set", "/nonexistent/set.jsonl", "./missing-folder/"]:
        add(f"run --evalset {value!r}", [*run, "--evalset", value])
    # Random junk for every free-text option: never a value that could start a study.
    for _ in range(20):
        junk = "".join(rng.choices(string.ascii_letters + string.punctuation, k=rng.randint(1, 12)))
        add(f"run --budget junk {junk!r}", [*run, "--budget", junk + "x"], "--budget")
    return cases


@pytest.mark.slow
def test_bad_option_values(sandbox: Sandbox) -> None:
    cases = option_cases(sandbox.inputs, random.Random(SEED))
    assert len(cases) >= 150
    check_all(cases, sandbox)


# --- storage URLs and study names -----------------------------------------------------------

# Commands that read a study; each must refuse a bad storage before it writes anything.
READERS = [["best"], ["export"], ["verify"], ["dashboard"], ["report", "--out", "r.html"]]

# URLs every command refuses before anything is written (run included).
BAD_STORAGE = [
    "sqlite://",
    "sqlite:///",
    "sqlite:///:memory:",
    "sqlite:////nonexistent-dir/x.db",
    "sqlite:///missing-dir/x.db",
    "sqlite:///sub/",
    "sqlite:///.",
    "notaurl",
    "://",
    "sqlite:",
]
# URLs only a reader can try (run would create the study there, or fail to connect later).
BAD_READER_STORAGE = [
    "sqlite:///missing.db",
    "mysql://user@host/db",
    "junk://x",
    "postgresql+nope://x/y",
]


def storage_cases(rng: random.Random) -> list[Case]:
    cases = []
    # A driver that is installed, and a server that is not there: refused, nothing written.
    bad_reader_storage = [
        *BAD_READER_STORAGE,
        f"postgresql+psycopg://u@127.0.0.1:{closed_port()}/db",
    ]
    for url in BAD_STORAGE:
        cases.append(Case(f"run --storage {url!r}", ["run", "--space", "smoke", "--storage", url]))
        for command in READERS:
            cases.append(Case(f"{command[0]} --storage {url!r}", [*command, "--storage", url]))
    for url in bad_reader_storage:
        for command in READERS:
            cases.append(Case(f"{command[0]} --storage {url!r}", [*command, "--storage", url]))
    for _ in range(10):
        junk = "".join(rng.choices(string.ascii_letters + string.punctuation, k=rng.randint(1, 20)))
        for command in READERS:
            cases.append(
                Case(f"{command[0]} --storage junk {junk!r}", [*command, "--storage", junk])
            )
    for command in READERS:  # no --study, no --storage, and no studies/ folder
        cases.append(Case(f"{command[0]} with nothing to read", list(command)))
    return cases


def study_name_cases(rng: random.Random) -> list[Case]:
    commands = [["run", "--space", "smoke"], *READERS]
    cases = []
    for name in bad_names(rng, 45):
        for command in commands:
            cases.append(
                Case(f"{command[0]} --study {name!r}", [*command, "--study", name], "--study")
            )
    return cases


def test_bad_storage_urls(sandbox: Sandbox) -> None:
    cases = storage_cases(random.Random(SEED))
    assert len(cases) >= 100
    check_all(cases, sandbox)


def test_bad_study_names(sandbox: Sandbox) -> None:
    cases = study_name_cases(random.Random(SEED))
    assert len(cases) >= 250
    check_all(cases, sandbox)


@pytest.mark.slow
def test_there_are_more_than_a_thousand_cases(tmp_path: Path) -> None:
    """The families together: the promise in this module's docstring."""
    total = (
        len(space_cases(tmp_path, random.Random(SEED)))
        + len(evalset_cases(tmp_path, random.Random(SEED)))
        + len(option_cases(tmp_path, random.Random(SEED)))
        + len(storage_cases(random.Random(SEED)))
        + len(study_name_cases(random.Random(SEED)))
    )
    assert total >= 1000, total
