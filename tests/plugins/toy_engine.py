"""A fifth engine for autotune, as a user would add one: this module and one entry-point line.

    [project.entry-points."autotune.backends"]
    toy = "toy_engine:BACKEND"

Its server is tests/fake_openai_server.py, an OpenAI-compatible chat server on the standard
library that streams a fixed answer, so a whole study runs on it in seconds
(tests/backends/test_plugin_engine.py). The registry imports this module while autotune.backends is
being built: at the top it may import autotune.backends.base only; the renderer imports the
export layer when it runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.backends.base import Backend

if TYPE_CHECKING:
    from autotune.export.base import Export, ServeOptions
    from autotune.params import TrialConfig

SERVER = Path(__file__).resolve().parent.parent / "fake_openai_server.py"

BACKEND = Backend(
    name="toy",
    # A server that answers from a script: no kernels, caches, GPUs or quantisation to choose.
    lacks=frozenset(
        {
            "attn_implementation",
            "compile_mode",
            "kv_cache_fraction",
            "tensor_parallel",
            "weight_quant",
            "kv_quant",
            "prefix_cache",
        }
    ),
    startup_guess_s=2.0,
    server=True,
    deploy_command=f"python {SERVER.name}",
    deploys=frozenset({"toy"}),
    renderer="toy_engine:render",
    length_fields=("max_tokens", "min_tokens"),
    reserved_flags={"port": "autotune (--port)", "model": "autotune (served model name)"},
)


def render(config: TrialConfig, opts: ServeOptions) -> Export:
    """The toy server's command for `config`: its port, its model name and the answer's
    pace; decoding travels in each request."""
    from autotune.engine_args import render_flags
    from autotune.export.base import Export, sampling_request

    argv = [sys.executable, str(SERVER), "--port", str(opts.port or 8000)]
    argv += ["--model", opts.served_model_name or "toy"]
    argv += render_flags("toy", opts.engine_args)
    return Export(
        format="toy",
        argv=argv,
        request=sampling_request(config, greedy={"temperature": 0}),
        notes=[f"serves a fixed answer; dtype {config.dtype} is only recorded"],
    )
