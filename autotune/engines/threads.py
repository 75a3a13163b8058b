"""How many CPU threads an engine's torch may use, chosen from the cores this run may use.

torch starts one OpenMP thread per core it sees. A study keeps more than the engine busy (its
own process streams requests, writes the storage and prints progress; `--gpus` runs several
engines at once), and on a machine with other work the engine's threads are preempted while
their peers spin-wait for them at every parallel region. On two busy cores the smoke study's
in-process engine measured 1.39 tok/s +-131% with torch's default threads and 16.0 +-16% with
one thread (issue 28). So an engine gets the cores of its share less one, which is left to
the study process, and at least one; a space or OMP_NUM_THREADS can say otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from autotune import variables

# Set by `autotune run --gpus` for its workers: how many engines the run keeps at once.
ENGINES_AT_ONCE_ENV = "AUTOTUNE_ENGINES_AT_ONCE"
# What the worker process's OpenMP, MKL and torch read before their first parallel region.
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    reason: str

    def env(self) -> dict[str, str]:
        """Environment for the engine's process: read before torch starts its thread pool."""
        return dict.fromkeys(THREAD_ENV_VARS, str(self.threads))

    def environment(self) -> dict[str, str]:
        """What a trial's record keeps of the choice."""
        return {"torch_threads": str(self.threads), "torch_threads_reason": self.reason}


def usable_cores() -> int:
    """Cores this process may run on (its affinity, which containers and taskset narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call (macOS): every core counts
        return max(1, os.cpu_count() or 1)


def _whole_number(text: str) -> int | None:
    """`text` as a positive whole number in ASCII digits, else None: str.isdigit() is true of
    '²' or '٣', which int() then refuses or reads as another number."""
    text = text.strip()
    if not text or len(text) > 9 or not all("0" <= c <= "9" for c in text):
        return None
    return int(text) or None


def engines_at_once() -> int:
    engines: int = variables.read(ENGINES_AT_ONCE_ENV)
    return engines


def choose_threads(requested: int | None) -> ThreadChoice:
    """The engine's thread count: the space's `cpu_threads`, else OMP_NUM_THREADS when the
    user set it, else the cores of this engine's share less one for the study process."""
    if requested is not None:
        return ThreadChoice(requested, f"cpu_threads: {requested} in the space")
    env_value = os.environ.get("OMP_NUM_THREADS", "").strip()
    from_env = _whole_number(env_value)
    if from_env is not None:
        return ThreadChoice(from_env, f"OMP_NUM_THREADS={env_value} in the environment")
    cores, engines = usable_cores(), engines_at_once()
    share = max(1, cores // engines)
    where = f"{cores} usable cores" + (f", {engines} engines at once" if engines > 1 else "")
    if share == 1:
        return ThreadChoice(1, f"{where}: 1 for the engine")
    return ThreadChoice(share - 1, f"{where}: {share - 1} for the engine, 1 for the study")
