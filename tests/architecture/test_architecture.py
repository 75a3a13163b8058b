"""The architecture holds: packages import only downwards (import-linter's layers contract in
pyproject.toml), and the check itself catches an upward import."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import FrameType

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_package_imports_only_the_ones_below_it() -> None:
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 kept, 0 broken" in result.stdout


def test_the_study_s_rooms_import_only_the_ones_below_them(tmp_path: Path) -> None:
    """Issue 41: the proposal policy may read results but never reach up into the loop that
    runs it; storage knows nothing of either."""
    shutil.copytree(REPO / "autotune", tmp_path / "autotune")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    steps = tmp_path / "autotune" / "study" / "proposals" / "steering.py"
    steps.write_text(
        steps.read_text(encoding="utf-8") + "\nfrom autotune.study.run import objective  # noqa\n",
        encoding="utf-8",
    )
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout[-3000:]
    assert "autotune.study.proposals.steering -> autotune.study.run.objective" in result.stdout


MAX_PACKAGE_MODULES = 15


def test_no_package_of_the_study_holds_more_than_15_modules() -> None:
    """Issue 41: a package is a room a reader can take in; past 15 modules it is a hall."""
    sizes = {
        str(package.relative_to(REPO)): len(list(package.glob("*.py")))
        for package in (REPO / "autotune" / "study").rglob("__init__.py")
        for package in [package.parent]
    }
    assert not {p: n for p, n in sizes.items() if n > MAX_PACKAGE_MODULES}, sizes
    assert sizes["autotune/study/run"] >= 10  # the rule reads the real packages


# Issue 41: the rooms the study loop enters itself (the autotune modules loop.py imports).
# Review at 1ea1714 counted 20 (12 in turn 4); opening, resuming and repairing a study now
# live in autotune.study.start.opening and the queueing of candidates in one module.
MAX_LOOP_ROOMS = 15


def imported_autotune_modules(path: Path) -> set[str]:
    """The autotune modules a module imports (`from autotune.x import y` names autotune.x)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("autotune"):
            found.add(str(node.module))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("autotune"))
    return found


def test_the_study_loop_enters_fewer_rooms_than_20() -> None:
    rooms = imported_autotune_modules(REPO / "autotune" / "study" / "run" / "loop.py")
    assert len(rooms) <= MAX_LOOP_ROOMS, sorted(rooms)
    assert "autotune.study.run.objective" in rooms  # the count reads the real loop


# Issue 55: the autotune.study modules the start of a study enters, counted along its calls:
# every distinct autotune.study.* module one of whose functions runs from the call into
# run_study (on a plan made beforehand, outside the count) until the first trial's objective
# is called. This count gives the 23 on 91b7aeb. The opening went back and forth to
# storage; the storage stack it crosses is merged (database.py: the retrying wrapper and the
# row-by-row reads; storage_urls.py: with Optuna's schema check; spool.py: with a trial's
# artifacts; recovery.py: with why a trial failed), the sampler holds its covering start-up
# and steering its one-lever steps, and the database's reads ask Optuna's public storage for a
# trial's id: 29 modules before, 22 after.
MAX_START_MODULES = 22


class _FirstTrial(Exception):
    """Raised by the profiler when the first trial begins: the start is over."""


def modules_entered_until_the_first_trial(tmp_path: Path) -> tuple[list[str], list[str]]:
    """The autotune modules whose functions run from `run_study` until the first trial's
    objective is called, in the order first entered; and those the opening alone enters
    (prepare_study)."""
    sys.path.insert(0, str(REPO / "tests"))
    from small_space import small_space

    from autotune.space import load_space
    from autotune.study.plan import plan_study
    from autotune.study.results.progress import Progress
    from autotune.study.run.loop import run_study

    space = load_space(str(small_space(tmp_path)))
    plan = plan_study(space, study_name="start", storage_url=f"sqlite:///{tmp_path}/start.db")
    progress = Progress(total=1, quiet=True)
    entered: list[str] = []
    opening: list[str] = []
    depth = [0]

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call" and event != "return":
            return  # C calls: the bulk of the events, none of them autotune's
        code, name = frame.f_code, frame.f_globals.get("__name__") or ""
        if code.co_name == "prepare_study" and name.endswith(".opening"):
            depth[0] += 1 if event == "call" else -1
        if event != "call" or not name.startswith("autotune."):
            return
        if name not in entered:
            entered.append(name)
        if depth[0] and name not in opening:
            opening.append(name)
        if name == "autotune.study.run.objective" and code.co_name == "__call__":
            raise _FirstTrial

    sys.setprofile(profile)
    try:
        run_study(plan, trials=1, progress=progress)
    except _FirstTrial:
        pass
    finally:
        sys.setprofile(None)
    return entered, opening


@pytest.mark.slow  # a real study opened under a profiler: seconds
def test_the_start_of_a_study_enters_fewer_modules(tmp_path: Path) -> None:
    entered, opening = modules_entered_until_the_first_trial(tmp_path)
    study = [name for name in entered if name.startswith("autotune.study.")]
    assert "autotune.study.run.objective" in study  # the count reached the first trial
    assert len(study) <= MAX_START_MODULES, study
    # The opening sits below the run-time and enters none of it (the budget's rule, which
    # the loop hands it, is asked only once the study has a reference).
    assert not [name for name in opening if name.startswith("autotune.study.run.")], opening
    assert "autotune.study.start.opening" in opening


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(REPO / "autotune", tmp_path / "autotune")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    statistics = tmp_path / "autotune" / "measure" / "steady.py"
    # The statistics reaching up to the study loop: the kind of import that made the cycle.
    statistics.write_text(
        statistics.read_text(encoding="utf-8")
        + "\nfrom autotune.study.results import select  # noqa\n",
        encoding="utf-8",
    )
    result = lint_imports(tmp_path)
    assert result.returncode == 1, result.stdout[-3000:]
    assert "BROKEN" in result.stdout
    assert "autotune.measure.steady -> autotune.study" in result.stdout


MAX_MODULE_LINES = 500
MAX_CLASS_LINES = 200


def _package_modules() -> list[Path]:
    return sorted((REPO / "autotune").rglob("*.py"))


def test_no_module_of_the_package_is_over_500_lines() -> None:
    long = {
        str(path.relative_to(REPO)): lines
        for path in _package_modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these modules along their seams: {long}"


def test_no_class_is_over_200_lines() -> None:
    """Issue 55: the last classes over the limit were split along their seams; none may grow
    back over it (no list of exceptions)."""
    sizes = {}
    for path in _package_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                name = f"{path.relative_to(REPO)}::{node.name}"
                sizes[name] = node.end_lineno - node.lineno + 1
    over = {name: size for name, size in sizes.items() if size > MAX_CLASS_LINES}
    assert not over, f"classes over {MAX_CLASS_LINES} lines: split them along their seams: {over}"
    assert "autotune/study/run/objective.py::Objective" in sizes  # the rule reads the classes


# Lines the formatter is told to leave alone: folded, they kept a module or a class under its
# limit without making it any shorter to read.
FOLDS = ("fmt: skip", "fmt: off")


def _folded_lines(path: Path, root: Path = REPO) -> list[str]:
    """'file:line' of each line in `path` that turns the formatter off."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        f"{path.relative_to(root)}:{number}"
        for number, line in enumerate(lines, 1)
        if any(fold in line for fold in FOLDS)
    ]


def test_the_package_is_laid_out_by_the_formatter_alone() -> None:
    """Issue 55: `# fmt: skip` folded calls onto fewer lines to keep rooms under their limits;
    the limits hold by real splits, so the package reads as `ruff format` lays it out."""
    folded = [line for path in _package_modules() for line in _folded_lines(path)]
    assert not folded, folded


def test_a_folded_line_is_found(tmp_path: Path) -> None:
    module = tmp_path / "folded.py"
    module.write_text("x = (1,\n     2)  # fmt: skip\n# fmt: off\ny = 3\n", encoding="utf-8")
    assert _folded_lines(module, tmp_path) == ["folded.py:2", "folded.py:3"]


def _module_attribute_writes(path: Path) -> list[str]:
    """`module.name = ...` in `path`, where `module` is a name bound by an import: a global
    of another module swapped by assignment (a patch), not a seam."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported |= {alias.asname or alias.name for alias in node.names}
    writes = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for target in targets:
            if (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id in imported
            ):
                writes.append(f"{path.name}:{node.lineno} {target.value.id}.{target.attr}")
    return writes


def test_the_replay_benchmark_patches_no_module_but_passes_the_loops_seams() -> None:
    """bench/cpu/replay.py runs the real study loop on a simulated clock and engine through
    run_study's `runtime` (autotune.study.run.runtime), not by swapping the loop's globals."""
    writes = [
        write
        for script in ("replay.py", "replay_engine.py")
        for write in _module_attribute_writes(REPO / "bench" / "cpu" / script)
    ]
    assert not writes, writes


def test_a_module_patch_is_found(tmp_path: Path) -> None:
    script = tmp_path / "patched.py"
    script.write_text(
        "import autotune.study.run.objective as objective_module\nimport time\n"
        "objective_module.time = None\nlocal = object()\n",
        encoding="utf-8",
    )
    assert _module_attribute_writes(script) == ["patched.py:3 objective_module.time"]


def test_racing_and_the_steps_read_the_front_not_the_whole_recommendation() -> None:
    """During every trial racing and the steps need the top of the feasible front only
    (autotune.study.results.select.front_top), not the recommendation with its what-ifs."""
    for name in ("run/racing.py", "proposals/steering.py"):
        tree = ast.parse((REPO / "autotune" / "study" / name).read_text(encoding="utf-8"))
        called = {
            node.func.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        }
        assert "front_top" in called and "recommend" not in called, (name, sorted(called))


# Optuna's ways of writing a user attribute: the trial's and study's own, and the storage's.
ATTRIBUTE_WRITES = frozenset({"set_user_attr", "set_trial_user_attr", "set_study_user_attr"})
ONE_WRITER = REPO / "autotune" / "records" / "writer.py"


def _attribute_writes(path: Path, root: Path = REPO) -> list[str]:
    """Calls of an attribute writer in `path` ('file:line name', the file from `root`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(root)}:{node.lineno} {node.func.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ATTRIBUTE_WRITES
    ]


def test_one_module_writes_what_studies_and_trials_store() -> None:
    """Issue 41: every user attribute is written by autotune.records.writer, which checks it
    as part of its record first; no other module calls Optuna's writers."""
    elsewhere = [
        write
        for path in _package_modules()
        if path != ONE_WRITER
        for write in _attribute_writes(path)
    ]
    assert not elsewhere, elsewhere
    assert {w.rsplit(" ", 1)[1] for w in _attribute_writes(ONE_WRITER)} == {
        "set_user_attr",
        "set_trial_user_attr",
    }


def test_a_write_outside_the_writer_is_found(tmp_path: Path) -> None:
    module = tmp_path / "writes.py"
    module.write_text(
        "def f(trial, storage):\n    trial.set_user_attr('x', 1)\n"
        "    storage.set_trial_user_attr(0, 'x', 1)\n    trial.user_attrs.get('x')\n",
        encoding="utf-8",
    )
    assert _attribute_writes(module, tmp_path) == [
        "writes.py:2 set_user_attr",
        "writes.py:3 set_trial_user_attr",
    ]


# The parts of a trial's record stored as JSON mappings, whose keys autotune.records reads (into
# the typed parts of autotune.records.parts, but for the configuration, kept as stored).
RECORD_LEAVES = frozenset(
    {"user_attrs", "environment", "time_s", "paired_vs_reference", "accuracy_floor", "owner",
     "step", "config"}
)  # fmt: skip


def _leaf_reads(path: Path, root: Path = REPO) -> list[str]:
    """Reads of a record part by a string key (`x.environment["runner"]`,
    `x.time_s.get("total")`) in `path`: 'file:line part[key]'."""
    reads = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            owner, key = node.value, node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
        ):
            owner, key = node.func.value, node.args[0]
        else:
            continue
        # A part's `stored()` is the mapping as written, for what shows it so; its keys are
        # read through the part's fields (autotune.records.parts), like the part's own.
        if (
            isinstance(owner, ast.Call)
            and isinstance(owner.func, ast.Attribute)
            and owner.func.attr == "stored"
        ):
            owner = ast.Attribute(value=owner.func.value, attr="stored()")
        if (
            isinstance(owner, ast.Attribute)
            and owner.attr in {*RECORD_LEAVES, "stored()"}
            and isinstance(key, ast.Constant)
            and isinstance(key.value, str)
        ):
            reads.append(f"{path.relative_to(root)}:{node.lineno} {owner.attr}[{key.value!r}]")
    return reads


def test_no_module_outside_the_records_reads_a_record_s_leaf_by_string() -> None:
    """Issue 41: a record's parts are read through typed views (autotune.records.parts and
    TrialRecord's properties), so a renamed key is one edit in records/. The space's own
    candidates keep a `config` mapping of their own (autotune.space.model)."""
    reads = [
        read
        for path in _package_modules()
        if not {"records", "space"} & set(path.relative_to(REPO / "autotune").parts)
        for read in _leaf_reads(path)
    ]
    assert reads == [], reads


def test_a_leaf_read_by_string_is_found(tmp_path: Path) -> None:
    module = tmp_path / "reads.py"
    module.write_text(
        "def f(record, m):\n    a = record.environment['runner']\n"
        "    b = m.time_s.get('total', 0.0)\n    c = record.env.runner\n"
        "    record.environment['x'] = 1\n    d = record.environment.stored()['runner']\n"
        "    e = record.time_s.stored().get('total')\n    f = record.environment.stored()\n",
        encoding="utf-8",
    )
    assert _leaf_reads(module, tmp_path) == [
        "reads.py:2 environment['runner']",
        "reads.py:3 time_s['total']",
        "reads.py:6 stored()['runner']",
        "reads.py:7 stored()['total']",
    ]


def _record_field_names() -> frozenset[str]:
    """The distinctive names of the fields a trial and a study store (their records and the
    parts of a trial's: autotune.records), aliases included.

    Distinctive: a compound name (`failure_kind`, `paired_vs_reference`, `n_items`). A single
    word (`name`, `config`, `accuracy`, `kind`) is also the key of evaluation items, spaces,
    reports and engine flags, so it would be found everywhere for reasons that are no record.
    Left out too: the versions every file autotune writes carries (`schema_version`,
    `autotune_version`, also the YAML export's), the stop rule's trail entries a race check
    copies (`tokens_per_s`, `ci_rel`, `wait_share`: autotune.measure.convergence), and
    `holdout_items`, which `autotune evalset needs --json` prints by discordance. So are
    the two open parts, whose entries are named by the code that measures them, as data: a
    trial's environment (engines add entries of their own; autotune.measure.cpu_load, below
    the records, names its load figures) and its time split (summed part by part, by name:
    autotune.study.results.timeshare, `TimeSplit.finite`).
    """
    from autotune.records import machine, parts, stored

    models = [stored.TrialRecord, stored.StudyRecord, machine.Machine]
    models += [parts.Owner, parts.Paired]
    models += [parts.FloorVerdict, parts.Stepped, parts.RaceCheck, parts.Confirmed]
    names = {
        name
        for model in models
        for field, info in model.model_fields.items()
        for name in (field, info.alias)
        if name and "_" in name
    }
    generic = {"schema_version", "autotune_version", "tokens_per_s", "ci_rel", "wait_share"}
    generic |= {"holdout_items"}
    return frozenset(names - generic)


def _string_keyed_record_fields(path: Path, fields: frozenset[str], root: Path = REPO) -> list[str]:
    """Record fields named by a string key in `path`, whatever holds them: a dict literal's
    key, a `dict(...)` keyword, `x["key"]` and `x.get("key")` ('file:line key')."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        keys: list[ast.expr | None] = []
        if isinstance(node, ast.Dict):
            keys = list(node.keys)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "dict"
        ):
            keys = [ast.Constant(k.arg, lineno=node.lineno) for k in node.keywords if k.arg]
        elif isinstance(node, ast.Subscript):
            keys = [node.slice]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            keys = node.args[:1] if node.func.attr == "get" else []
        found += [
            f"{path.relative_to(root)}:{key.lineno} {key.value}"
            for key in keys
            if isinstance(key, ast.Constant) and key.value in fields
        ]
    return found


def test_no_module_outside_the_records_names_a_record_field_by_string() -> None:
    """Issue 55: a record is built and read through its typed models (autotune.records), so a
    renamed or misspelt field is one edit there, not a silent None; this finds string keys
    that name a record field, whatever the mapping holding them is called."""
    fields = _record_field_names()
    found = [
        site
        for path in _package_modules()
        if "records" not in path.relative_to(REPO / "autotune").parts
        for site in _string_keyed_record_fields(path, fields)
    ]
    assert found == [], found


def test_a_record_field_named_by_string_is_found(tmp_path: Path) -> None:
    module = tmp_path / "keyed.py"
    module.write_text(
        "def f(attrs, m):\n    a = {'failure_kind': 1, 'kind': 2}\n"
        "    b = dict(paired_vs_reference=1, name=2)\n    c = m['n_items']\n"
        "    m.get('time_s')\n    m['launch_id'] = 1\n    d = m.failure_kind\n"
        "    e = m.get('accuracy')\n",
        encoding="utf-8",
    )
    assert _string_keyed_record_fields(module, _record_field_names(), tmp_path) == [
        "keyed.py:2 failure_kind",
        "keyed.py:3 paired_vs_reference",
        "keyed.py:4 n_items",
        "keyed.py:5 time_s",
        "keyed.py:6 launch_id",
    ]
