"""The child process that tries each engine plugin before autotune imports any of them.

    python -m autotune.backends.probe NAME...

For each named entry point of the `autotune.backends` group, in order, it writes one JSON line
before loading it ({"name": N}) and one after ({"name": N, "problem": null or why}), on what was
its standard output; the plugin's own prints go to standard error. A plugin that ends this
process (os._exit, a crash) or hangs it is known to the parent by the last line it read
(autotune.backends.plugins).
"""

from __future__ import annotations

import json
import os
import sys

from autotune.backends import BACKENDS
from autotune.backends.plugins import PluginProblem, entry_points, load


def main(names: list[str]) -> int:
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # a plugin printing at import cannot garble the protocol
    taken = set(BACKENDS)
    by_name = {entry.name: entry for entry in entry_points()}
    for name in names:
        print(json.dumps({"name": name}), file=protocol, flush=True)
        entry = by_name.get(name)
        problem: str | None = "it is no longer installed"
        if entry is not None:
            try:
                taken.add(load(entry, taken, renderer=True).name)
                problem = None
            except PluginProblem as exc:
                problem = str(exc)
        print(json.dumps({"name": name, "problem": problem}), file=protocol, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
