"""A plugin that raises, exits or ends the process is skipped with one line naming it; the
help and the version load none; a broken renderer is one line from `autotune export`.

Each hostile plugin is a real module behind a real entry point (test_plugin_engine's
install_plugin), loaded by the real command in a process of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from small_space import autotune_cli
from test_plugin_engine import install_plugin

from autotune import __version__

# name -> the module's source; each entry point is "NAME = NAME_mod:BACKEND".
HOSTILE = {
    "raises": "raise RuntimeError('no GPU driver')\n",
    "exits": "import sys\nsys.exit(3)\n",
    "ends": "import os\nos._exit(0)\n",
    "getattr": ("def __getattr__(name):\n    raise RuntimeError(f'no attribute {name} today')\n"),
    "prop_raises": (
        "from toy_engine import BACKEND as TOY\n"
        "from autotune.backends.base import Backend\n"
        "class Hostile(Backend):\n"
        "    @property\n"
        "    def lacks(self):\n"
        "        raise RuntimeError('lacks exploded')\n"
        "BACKEND = object.__new__(Hostile)\n"
        "object.__setattr__(BACKEND, 'name', 'prop_raises')\n"
    ),
    "prop_exits": (
        "import os\n"
        "from autotune.backends.base import Backend\n"
        "class Hostile(Backend):\n"
        "    def __getattribute__(self, name):\n"
        "        os._exit(0)\n"
        "BACKEND = object.__new__(Hostile)\n"
    ),
    "class_exits": (
        "import sys\n"
        "class Sneaky:\n"
        "    @property\n"
        "    def __class__(self):\n"
        "        sys.exit(4)\n"
        "BACKEND = Sneaky()\n"
    ),
    "wrong_types": (
        "import dataclasses\n"
        "from toy_engine import BACKEND as TOY\n"
        "BACKEND = dataclasses.replace(TOY, name='wrong_types', startup_guess_s=float('nan'))\n"
    ),
    "renderer_ends": (
        "import dataclasses\n"
        "from toy_engine import BACKEND as TOY\n"
        "BACKEND = dataclasses.replace(TOY, name='renderer_ends', renderer='ends_mod:render')\n"
    ),
}
EXPECTED_LINES = {
    "raises": "it does not import (RuntimeError: no GPU driver)",
    "exits": "it does not import (it called sys.exit(3))",
    "ends": "it ended the process while loading (exit status 0)",
    "getattr": "it does not import (RuntimeError: no attribute BACKEND today)",
    "prop_raises": "reading it failed (RuntimeError: lacks exploded)",
    "prop_exits": "it ended the process while loading (exit status 0)",
    "class_exits": "reading it failed (it called sys.exit(4))",
    "wrong_types": "its startup_guess_s is not a number of seconds",
    "renderer_ends": "it ended the process while loading (exit status 0)",
}


@pytest.fixture(scope="module")
def hostile_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("hostile")
    for name, source in HOSTILE.items():
        (root / f"{name}_mod.py").write_text(source, encoding="utf-8")
    env = install_plugin(
        root / "site",
        "toy = toy_engine:BACKEND",
        *(f"{name} = {name}_mod:BACKEND" for name in HOSTILE),
    )
    env["PYTHONPATH"] = f"{root}{os.pathsep}{env['PYTHONPATH']}"
    return env


def test_every_hostile_plugin_is_skipped_with_one_line(hostile_env: dict[str, str]) -> None:
    shown = subprocess.run(
        [sys.executable, "-c", "from autotune.backends import BACKENDS; print(*BACKENDS)"],
        capture_output=True, text=True, env=hostile_env, timeout=300,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["transformers", "swift", "lmdeploy", "vllm", "toy"]
    lines = shown.stderr.strip().splitlines()
    assert len(lines) == len(HOSTILE), shown.stderr
    for name, expected in EXPECTED_LINES.items():
        said = [line for line in lines if f"engine plugin {name!r} ({name}_mod:BACKEND)" in line]
        assert len(said) == 1 and expected in said[0], (name, said)
    assert "Traceback" not in shown.stderr


def test_help_and_version_load_no_plugin(hostile_env: dict[str, str], tmp_path: Path) -> None:
    for args in (["--version"], ["--help"], ["run", "--help"], ["export", "-h"]):
        result = autotune_cli(*args, cwd=tmp_path, env=hostile_env, timeout=120)
        assert result.returncode == 0, (args, result.stderr)
        assert result.stderr == "", (args, result.stderr)  # not a line about any plugin
    version = autotune_cli("--version", cwd=tmp_path, env=hostile_env, timeout=120)
    assert __version__ in version.stdout


@pytest.mark.slow
def test_a_command_goes_on_with_the_sound_plugins(
    hostile_env: dict[str, str], small_study: tuple[str, str], tmp_path: Path
) -> None:
    url, name = small_study
    best = autotune_cli("best", "--study", name, "--storage", url, cwd=tmp_path, env=hostile_env)
    assert best.returncode == 0, best.stderr
    assert "recommended: trial" in best.stdout
    assert len(best.stderr.strip().splitlines()) == len(HOSTILE), best.stderr


BROKEN_RENDERER = """
import dataclasses
from toy_engine import BACKEND as TOY

def render(config, opts):
    {body}

BACKEND = dataclasses.replace(
    TOY, name="broken", deploys=frozenset({{"broken", "transformers"}}),
    renderer="broken_mod:render",
)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("raise RuntimeError('renderer exploded')", "failed (RuntimeError: renderer exploded)"),
        ("raise SystemExit(5)", "failed (it called sys.exit(5))"),
        ("return 'a command'", "returned a str, not an Export"),
    ],
    ids=["raises", "exits", "returns-a-string"],
)
def test_a_broken_export_renderer_is_one_line(
    body: str, expected: str, small_study: tuple[str, str], tmp_path: Path
) -> None:
    (tmp_path / "broken_mod.py").write_text(BROKEN_RENDERER.format(body=body), encoding="utf-8")
    env = install_plugin(tmp_path / "site", "broken = broken_mod:BACKEND")
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env['PYTHONPATH']}"
    url, name = small_study
    exported = autotune_cli(
        "export", "--study", name, "--storage", url, "--format", "broken", cwd=tmp_path, env=env
    )
    assert exported.returncode == 2, exported.stdout + exported.stderr
    assert "Traceback" not in exported.stderr
    lines = exported.stderr.strip().splitlines()
    assert len(lines) == 1, exported.stderr
    assert "engine plugin 'broken'" in lines[0] and expected in lines[0], lines
