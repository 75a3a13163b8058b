"""In-process Hugging Face transformers engine: static batches, optional static cache + compile.

Runs inside the worker process only (it imports torch), so a crash or an out-of-memory error here
fails one trial and never the study. The model is loaded once per launch (dtype, attention,
compile mode); every `generate` call takes the request-time settings of its trial.

Images are put on the processor's grid the way qwen-vl-utils does (autotune.checkpoints.
geometry), so the processor resizes nothing: `swift deploy`, which preprocesses with
qwen-vl-utils, then sees the very pixels this engine saw (tests/export/test_swift_reproduces.py).
"""

from __future__ import annotations

import copy
import resource
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor, GenerationConfig
from transformers.generation.streamers import BaseStreamer

from autotune.checkpoints.adapters import Adapter
from autotune.checkpoints.geometry import ImageGeometry
from autotune.engines.inprocess.clock import EngineClock, engine_clock
from autotune.engines.inprocess.vision_cache import VisionCache, image_key
from autotune.evalset.images import resize_to_max_side
from autotune.measure.repeats import mark_image
from autotune.measure.timing import RequestTiming
from autotune.params import TrialConfig
from autotune.records import Prompt, Reply

# A batch made ready for the model: its images on the grid, and the processor's tensors.
Prepared = tuple[list[Any], Any]
_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class _StepClock(BaseStreamer):
    """Timestamps every decoding step; generate() calls put() once per new token column."""

    def __init__(self, now: Callable[[], float]) -> None:
        self.now = now
        self.prompt_seen = False
        self.step_times: list[float] = []
        self.step_walls: list[float] = []  # the same instants on the wall clock
        self.step_tokens: list[list[int]] = []

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:  # the first call carries the prompt, not a new token
            self.prompt_seen = True
            return
        self.step_times.append(self.now())  # .tolist() below synchronises the device
        self.step_tokens.append(value.reshape(-1).tolist())
        self.step_walls.append(time.perf_counter())

    def end(self) -> None:
        pass

    def record_all(self, new_tokens: torch.Tensor, *, at: float) -> None:
        """Every step of a finished batch at once (`new_tokens`: rows by steps), stamped `at`."""
        for column in new_tokens.T.tolist():
            self.step_times.append(at)
            self.step_tokens.append(column)

    def answer(self, index: int, eos_ids: set[int], limit: int | None) -> list[tuple[int, float]]:
        """Row `index`'s tokens and the instant of each, through its end-of-sequence token or
        its first `limit` tokens."""
        tokens: list[tuple[int, float]] = []
        for step, at in zip(self.step_tokens[:limit], self.step_times, strict=False):
            tokens.append((step[index], at))
            if step[index] in eos_ids:
                break
        return tokens


def _reply(
    request: Prompt, tokens: list[tuple[int, float]], tokenizer: Any, start: float, end: float
) -> Reply:
    """One answer of a batch: its text and its timing (first and last token, token count)."""
    text = tokenizer.decode([token for token, _ in tokens], skip_special_tokens=True).strip()
    return Reply(
        item_id=request.item_id,
        text=text,
        timing=RequestTiming(
            start=start,
            first_token=tokens[0][1] if tokens else end,
            last_token=tokens[-1][1] if tokens else end,
            end=end,
            output_tokens=len(tokens),
        ),
    )


def _split(
    clock: _StepClock, rows: int, start: float, prepared: float, generated: float, end: float
) -> dict[str, float]:
    """One generate call's wall time in parts: preparing (0 when done ahead), generating, and
    the replies' text; with per-step timestamps, generating split into the prompt's pass up
    to the first token and the later decoding steps (without them no step is timed)."""
    parts = {
        "rows": rows,
        "steps": len(clock.step_tokens),
        "prepare_s": prepared - start,
        "generate_s": generated - prepared,
        "replies_s": end - generated,
    }
    if clock.step_walls:
        parts["prefill_s"] = clock.step_walls[0] - prepared
        parts["decode_s"] = generated - clock.step_walls[0]
    return parts


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("the space asks for device 'cuda' but torch sees no CUDA GPU")
    return device


class TransformersEngine:
    """AutoModelForImageTextToText + AutoProcessor, generating static batches.

    `launch` holds the load-time values (dtype, attention, compile mode); each `generate`
    call takes its trial's own configuration for everything chosen per request.
    """

    def __init__(
        self,
        model_path: str,
        launch: TrialConfig,
        *,
        device: str = "auto",
        adapters: list[Adapter] | None = None,
    ) -> None:
        self.model_path = model_path
        self.launch = launch
        self.device = resolve_device(device)
        self.adapters = adapters or []
        self.model: Any = None
        self.processor: Any = None
        self.geometry = ImageGeometry()
        self.eos_ids: set[int] = set()
        self.vision_cache: VisionCache | None = None
        # A fast tokenizer used from two threads at once (`prepare` ahead, a reply's decoding)
        # can fail with "Already borrowed": its padding settings are mutable state. So replies
        # decode with a copy of their own (`tokenizer`), and each is used under its own lock:
        # a batch's replies never wait for the next batch's image work, which holds
        # `prepare_lock` for the whole processor call.
        self.tokenizer: Any = None
        self.tokenizer_lock = threading.Lock()
        self.prepare_lock = threading.Lock()
        # Each generate call's time split when a list (bench/cpu/reference_pass.py); None: off.
        self.batch_log: list[dict[str, float]] | None = None
        # Every load-test timestamp; chosen in the worker's main thread once torch is loaded.
        self.clock: EngineClock = engine_clock("cuda", 1)

    def load(self) -> None:
        kwargs: dict[str, Any] = {"attn_implementation": self.launch.attn_implementation}
        if self.launch.dtype != "auto":
            kwargs["dtype"] = _DTYPES[self.launch.dtype]
        else:
            kwargs["dtype"] = "auto"
        self.processor = AutoProcessor.from_pretrained(self.model_path)
        self.processor.tokenizer.padding_side = "left"  # decoder-only batches pad on the left
        self.tokenizer = copy.deepcopy(self.processor.tokenizer)
        image_processor = self.processor.image_processor
        self.geometry = ImageGeometry(
            factor=int(image_processor.patch_size) * int(image_processor.merge_size),
            min_pixels=int(image_processor.size["shortest_edge"]),
            max_pixels=int(image_processor.size["longest_edge"]),
        )
        fp8 = self.launch.weight_quant == "fp8"
        if fp8:  # quantised on load, straight onto the GPU
            kwargs.update(_fp8_load_kwargs(self.device))
        model = AutoModelForImageTextToText.from_pretrained(self.model_path, **kwargs)
        if not fp8:
            model = model.to(self.device)
        if self.adapters:
            model = _with_adapters(model, self.adapters)
        self.model = model.eval()
        if self.launch.prefix_cache:
            self.vision_cache = VisionCache(self.model)
        eos = self.model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.clock = engine_clock(self.device, torch.get_num_threads())

    def reset_peak_memory(self) -> None:
        """Start a new peak: each trial on a launch reports its own (and a cold cache)."""
        if self.vision_cache is not None:
            self.vision_cache.clear()
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()

    def generate(
        self,
        batch: list[Prompt],
        config: TrialConfig,
        *,
        forced_tokens: int | None = None,
        answer_tokens: list[int] | None = None,
        prepared: Prepared | None = None,
        step_times: bool = True,
    ) -> list[Reply]:
        """Answer one static batch; with `forced_tokens` every answer is exactly that long,
        and with `answer_tokens` too each answer is cut to its own length (it ends there).
        `prepared`: this batch's `prepare`, done ahead (its time is then not the batch's).
        `step_times`: timestamp every decoding step (a load test's TTFT and TPOT). Off, the
        tokens are read from the finished batch: no step waits for the device, so the host
        queues the next step's kernels while the device runs this one (an accuracy pass)."""
        start = self.clock.now()
        wall = time.perf_counter()
        images, inputs = prepared if prepared is not None else self.prepare(batch, config)
        prepared_at = time.perf_counter()
        if self.vision_cache is not None:
            self.vision_cache.next_keys = [image_key(image) for image in images]
        clock = _StepClock(self.clock.now)
        if config.do_sample:
            torch.manual_seed(config.seed)
        inputs = inputs.to(self.device)
        with torch.inference_mode():
            sequences = self.model.generate(
                **inputs,
                generation_config=_generation_config(
                    self.model.generation_config,
                    self.processor.tokenizer.pad_token_id,
                    self.launch.compile_mode,
                    config,
                    forced_tokens,
                ),
                streamer=clock if step_times else None,
            )
        end = self.clock.now()
        generated_at = time.perf_counter()
        if not step_times:
            sequences = getattr(sequences, "sequences", sequences)  # a dict when configured so
            clock.record_all(sequences[:, inputs["input_ids"].shape[1] :], at=end)
        limits = answer_tokens if answer_tokens is not None else [None] * len(batch)
        tokenizer = self.tokenizer
        with self.tokenizer_lock:
            replies = [
                _reply(request, clock.answer(index, self.eos_ids, limit), tokenizer, start, end)
                for index, (request, limit) in enumerate(zip(batch, limits, strict=True))
            ]
        if self.batch_log is not None:
            self.batch_log.append(
                _split(clock, len(batch), wall, prepared_at, generated_at, time.perf_counter())
            )
        return replies

    def prepare(self, batch: list[Prompt], config: TrialConfig) -> Prepared:
        """One batch's images on the processor's grid and its tensors, on the CPU: the part
        of a batch a thread can do while the model answers the one before."""
        images = [
            mark_image(
                self.geometry.fit(resize_to_max_side(r.image, config.image_max_side)), r.mark
            )
            for r in batch
        ]
        # Render the template to text, then call the processor: the same two steps on every
        # transformers 5.x (keyword routing inside apply_chat_template changed between them).
        texts = [
            self.processor.apply_chat_template(
                [
                    {
                        "role": "user",
                        "content": [{"type": "image"}, {"type": "text", "text": r.prompt}],
                    }
                ],
                add_generation_prompt=True,
                tokenize=False,
            )
            for r in batch
        ]
        # The images are on the grid already: the processor must not resample them again.
        with self.prepare_lock:
            inputs = self.processor(
                text=texts,
                images=images,
                padding=True,
                return_tensors="pt",
                images_kwargs={"do_resize": False},
            )
        return images, inputs

    def peak_memory_mib(self) -> tuple[float, str]:
        if self.device == "cuda":
            return torch.cuda.max_memory_reserved() / 2**20, "cuda"
        # ru_maxrss is in KiB on Linux: the whole worker process, weights included.
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "rss"

    def describe(self) -> dict[str, str]:
        import transformers

        info = {
            "device": self.device,
            "torch_version": torch.__version__,
            "transformers_version": transformers.__version__,
            # What torch applied (from OMP_NUM_THREADS, autotune.engines.threads), not asked.
            "torch_threads": str(torch.get_num_threads()),
            **self.clock.describe(),
        }
        if self.device == "cuda":
            info["gpu_name"] = torch.cuda.get_device_name()
        return info

    def close(self) -> None:
        self.model = None
        if self.device == "cuda":
            torch.cuda.empty_cache()


def _generation_config(
    base: GenerationConfig,
    pad_token_id: int | None,
    compile_mode: str,
    cfg: TrialConfig,
    forced_tokens: int | None = None,
) -> GenerationConfig:
    """The generate() settings of one trial's request on a model whose checkpoint's own are
    `base` (`pad_token_id`: the tokenizer's, where the checkpoint names none)."""
    values: dict[str, Any] = {
        "max_new_tokens": cfg.max_new_tokens if forced_tokens is None else forced_tokens,
        "do_sample": cfg.do_sample,
        "repetition_penalty": cfg.repetition_penalty,
        "eos_token_id": base.eos_token_id,
        "pad_token_id": base.pad_token_id if base.pad_token_id is not None else pad_token_id,
        "bos_token_id": base.bos_token_id,
    }
    if forced_tokens is not None:
        # Equal work (workload.output_tokens): end-of-sequence cannot end an answer early.
        values["min_new_tokens"] = forced_tokens
    if cfg.do_sample:
        values.update(temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p)
    else:
        # The checkpoint's own sampling defaults must not leak into greedy decoding.
        values.update(temperature=None, top_k=None, top_p=None)
    if compile_mode != "none":
        from transformers import CompileConfig

        compile_config = CompileConfig(mode=compile_mode)
        # generate() compiles automatically only on accelerators; the flag lets the smoke
        # space exercise the same path on a CPU.
        compile_config._compile_all_devices = True
        values.update(cache_implementation="static", compile_config=compile_config)
    return GenerationConfig(**values)


def _fp8_load_kwargs(device: str) -> dict[str, Any]:
    """from_pretrained arguments that quantise the weights to block FP8 on load (a what-if:
    no deploy target quantises on load this way)."""
    if device != "cuda":
        raise RuntimeError("weight_quant fp8: transformers' FineGrainedFP8Config runs on CUDA only")
    from transformers import FineGrainedFP8Config

    # The vision tower stays in the dtype, as in Qwen's -FP8 releases.
    config = FineGrainedFP8Config(modules_to_not_convert=["visual", "lm_head"])
    return {"quantization_config": config, "device_map": device}


def _with_adapters(model: Any, adapters: list[Adapter]) -> Any:
    """`model` with every LoRA adapter loaded, the first one active (what requests measure)."""
    try:
        from peft import PeftModel
    except ImportError:
        raise RuntimeError("--adapter needs peft: pip install 'autotune[lora]'") from None
    first, *others = adapters
    wrapped = PeftModel.from_pretrained(model, first.path, adapter_name=first.name)
    for adapter in others:
        wrapped.load_adapter(adapter.path, adapter_name=adapter.name)
    wrapped.set_adapter(first.name)
    return wrapped
