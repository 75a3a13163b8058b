"""The `autotune` command line: thin wrappers over library functions (`base`: the group and
its one-line errors; one module per kind of command)."""

from __future__ import annotations

import os
import sys

try:
    # The help and the version are read without loading any engine plugin: a broken plugin
    # must not take them down too (autotune.backends.plugins). Set before the commands are
    # imported, which build the registry. Their help then lists the built-in engines only.
    if {"--help", "-h", "--version"} & set(sys.argv[1:]):
        os.environ["AUTOTUNE_NO_PLUGINS"] = "1"

    from autotune.cli import evaluation, results, run  # noqa: F401  (each registers its commands)
    from autotune.cli.base import main
except KeyboardInterrupt:
    # Ctrl-C during the imports (a second or two of torch, optuna and the engines' registry):
    # the same line and status as later, not a traceback from whatever was being imported.
    # os._exit: nothing has run that needs cleaning up, and an interrupt that passed through
    # an extension's own PyRun call has Python end by SIGINT whatever sys.exit says.
    sys.stderr.write("interrupted: before the command started; nothing was run or written\n")
    sys.stderr.flush()
    os._exit(130)

__all__ = ["main"]
