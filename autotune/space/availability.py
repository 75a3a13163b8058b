"""Which engines and kernels are installed here, and how to get the ones that are not.

A space may name every backend; a study searches only those that can run on this machine, and
says which it dropped, instead of failing one trial after another.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

from autotune.backends import BACKENDS

# What is missing -> how to install it (one line the user can paste).
_BACKEND_CHECKS: dict[str, tuple[str, str | None, str]] = {
    # backend: (python module, command on PATH or None, install hint)
    name: (backend.module, backend.program, backend.install_hint or f"install {name}")
    for name, backend in BACKENDS.items()
    if backend.module
}
_ATTN_CHECKS: dict[str, tuple[str, str]] = {
    "flash_attention_2": ("flash_attn", "pip install 'autotune[flash-attn]'"),
}


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _has_command(name: str) -> bool:
    """On PATH, or beside this interpreter (where the server runner launches it from)."""
    beside = Path(sys.executable).parent / name
    return shutil.which(name) is not None or beside.is_file()


def missing_reason(param: str, value: object) -> str | None:
    """Why `param=value` cannot run here (with the install command), or None if it can."""
    if param == "backend" and value in _BACKEND_CHECKS:
        module, command, hint = _BACKEND_CHECKS[str(value)]
        if not _has_module(module) or (command and not _has_command(command)):
            return f"backend {value} is not installed ({hint})"
    if param == "attn_implementation" and value in _ATTN_CHECKS:
        module, hint = _ATTN_CHECKS[str(value)]
        if not _has_module(module):
            return f"attn_implementation {value} needs flash-attn ({hint})"
    return None
