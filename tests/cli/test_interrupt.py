"""Ctrl-C at any early moment of `autotune run` (its imports, its argument parsing, the study's
opening) is status 130 and one line, never a KeyboardInterrupt traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("after_s", [0.0, 0.2, 0.5, 1.0, 2.0])
def test_ctrl_c_early_in_a_run_is_130_and_one_line(tmp_path: Path, after_s: float) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "autotune.cli",
            "run",
            "--space",
            "smoke",
            "--trials",
            "1",
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # The default handler, whatever the suite's shell left: Python installs its own.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # From the moment autotune's own code runs (its first import, click, has completed:
    # -X importtime says so on stderr), so the moments hold on a busy machine too. Before it,
    # Python is starting up: an interrupt there is Python's own.
    err_lines = []
    assert process.stderr is not None
    for line in process.stderr:
        err_lines.append(line)
        if line.rstrip().split("|")[-1].strip() == "click":
            break
    time.sleep(after_s)
    process.send_signal(signal.SIGINT)
    err_lines += list(process.stderr)  # the rest, through the same buffered reader
    process.wait(timeout=300)
    err = "".join(line for line in err_lines if not line.startswith("import time:"))
    assert process.returncode == 130, err
    assert "Traceback" not in err and "Aborted" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("interrupted: "), err
    assert len([line for line in lines if line.startswith("interrupted")]) == 1, err
