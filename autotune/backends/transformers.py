"""Plain transformers, in autotune's own worker process: the reference engine.

transformers 5.x: `FineGrainedFP8Config` (block FP8, 128 x 128) quantises on load, on CUDA
only; its quantised KV caches need optimum-quanto or HQQ, which no deploy target serves. Both
are what-ifs: no `swift deploy` flag reproduces them.
"""

from autotune.backends.base import Backend

_NO_QUANTISED_KV = (
    "transformers' quantised KV caches need optimum-quanto or HQQ, and no deploy target serves them"
)

BACKEND = Backend(
    name="transformers",
    startup_guess_s=20.0,
    unsupported={"kv_quant": dict.fromkeys(("int8", "int4", "fp8"), _NO_QUANTISED_KV)},
    cuda_only={
        "weight_quant": {"fp8": "transformers' FineGrainedFP8Config runs on CUDA GPUs only"}
    },
)
