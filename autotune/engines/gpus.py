"""The GPUs of this host: what they are, which ones a run uses, and how an engine is pinned.

Read through NVML (the study process never imports torch). `AUTOTUNE_FAKE_GPUS` stands in for
NVML where there is no GPU, so the scheduling around GPUs runs in CPU tests with real
processes: `AUTOTUNE_FAKE_GPUS=2` fakes two identical devices, `"NVIDIA H200@1980,NVIDIA
H100@1755"` names each one and its SM clock (MHz). An engine on a faked GPU runs on the CPU.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass
from typing import Any

from autotune import variables
from autotune.errors import SpaceError

FAKE_GPUS_ENV = "AUTOTUNE_FAKE_GPUS"


@dataclass(frozen=True)
class Gpu:
    index: int  # NVML's index, the one CUDA_VISIBLE_DEVICES takes with PCI bus ordering
    name: str
    uuid: str
    memory_mib: int
    sm_clock_mhz: int | None  # the clock kernels run at when busy: the application clock
    sm_clock_max_mhz: int | None
    fake: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def label(self) -> str:
        clock = f", {self.sm_clock_mhz} MHz" if self.sm_clock_mhz else ""
        return f"GPU {self.index} ({self.name}{clock})"


# More fakes than any host has GPUs: a test hook that would start a worker for each.
MAX_FAKE_GPUS = 64


def _ascii_digits(text: str) -> bool:
    """Whether `text` is a whole number in ASCII digits (str.isdigit also takes '²')."""
    return bool(text) and len(text) <= 9 and all("0" <= c <= "9" for c in text)


def _fake_gpus(spec: str) -> list[Gpu]:
    text = spec.strip()
    if _ascii_digits(text):
        entries = ["fake GPU"] * min(int(text), MAX_FAKE_GPUS + 1)
    else:
        entries = [part.strip() for part in text.split(",", MAX_FAKE_GPUS + 1) if part.strip()]
    if len(entries) > MAX_FAKE_GPUS:
        raise SpaceError(
            f"{FAKE_GPUS_ENV}={text[:40]!r}: at most {MAX_FAKE_GPUS} fake GPUs (a test hook: "
            f"a number, or names like 'NVIDIA H200@1980,NVIDIA H200'); unset it on a real host"
        )
    gpus = []
    for index, entry in enumerate(entries):
        name, _, clock = entry.partition("@")
        mhz = int(clock.strip()) if _ascii_digits(clock.strip()) else 1000
        gpus.append(
            Gpu(
                index=index,
                name=name.strip() or "fake GPU",
                uuid=f"GPU-fake-{index}",
                memory_mib=16384,
                sm_clock_mhz=mhz,
                sm_clock_max_mhz=mhz,
                fake=True,
            )
        )
    return gpus


def _nvml_gpus() -> list[Gpu]:
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
    except Exception:  # no driver, no NVML library: no usable GPU
        return []
    try:
        gpus = []
        for index in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            gpus.append(
                Gpu(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // 2**20,
                    sm_clock_mhz=_clock(pynvml, handle, pynvml.nvmlDeviceGetApplicationsClock),
                    sm_clock_max_mhz=_clock(pynvml, handle, pynvml.nvmlDeviceGetMaxClockInfo),
                )
            )
        return gpus
    except Exception:
        return []
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _clock(pynvml: Any, handle: Any, read: Any) -> int | None:
    try:
        return int(read(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # not supported on this board or driver
        return None


def detect_gpus() -> list[Gpu]:
    """Every GPU of this host (faked ones where AUTOTUNE_FAKE_GPUS says so); [] for none."""
    fake: str | None = variables.read(FAKE_GPUS_ENV)
    if fake:
        return _fake_gpus(fake)
    return _nvml_gpus()


def visible_gpus() -> list[Gpu]:
    """The GPUs this process may use: those CUDA_VISIBLE_DEVICES names (indices or UUIDs), in
    its order, or all of them when it is unset."""
    gpus = detect_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or any(gpu.fake for gpu in gpus):
        return gpus
    by_index = {str(gpu.index): gpu for gpu in gpus}
    by_uuid = {gpu.uuid: gpu for gpu in gpus}
    chosen = []
    for entry in (part.strip() for part in visible.split(",") if part.strip()):
        gpu = by_index.get(entry) or by_uuid.get(entry)
        if gpu is None:
            break  # CUDA stops at the first entry it cannot read, and so do we
        chosen.append(gpu)
    return chosen


def parse_gpu_spec(spec: str) -> list[int] | None:
    """`all` (None) or the indices of `--gpus 0,1,3`; one SpaceError line for anything else,
    before any GPU is looked for."""
    if not spec.strip():
        raise SpaceError("--gpus is empty; write e.g. --gpus 0,1 or --gpus all")
    if spec.strip().lower() == "all":
        return None
    indices: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        # ASCII digits only: str.isdigit also takes '²' and '٣', which int() then refuses or
        # reads as another number.
        if not (part.isascii() and part.isdigit()) or len(part) > 4:
            raise SpaceError(
                f"--gpus {spec}: {part!r} is not a GPU index; write e.g. --gpus 0,1 or --gpus all"
            )
        if int(part) in indices:
            raise SpaceError(f"--gpus {spec}: GPU {part} is named twice")
        indices.append(int(part))
    return indices


def select_gpus(spec: str) -> list[Gpu]:
    """The GPUs `--gpus` names: `all`, or indices like `0,1,3`. One line for a wrong value."""
    wanted = parse_gpu_spec(spec)
    available = detect_gpus()
    if not available:
        raise SpaceError(
            f"--gpus {spec}: this machine has no NVIDIA GPU that the driver can see; leave "
            "--gpus out to run on the CPU"
        )
    if wanted is None:
        return available
    by_index = {gpu.index: gpu for gpu in available}
    missing = [index for index in wanted if index not in by_index]
    if missing:
        raise SpaceError(
            f"--gpus {spec}: there is no GPU {missing[0]} (this machine has "
            f"{', '.join(str(i) for i in by_index)})"
        )
    return [by_index[index] for index in wanted]


def pinned_env(gpus: list[Gpu]) -> dict[str, str]:
    """The environment that gives an engine exactly these GPUs.

    CUDA numbers devices fastest first unless told otherwise; PCI bus order makes its
    numbering NVML's, so the memory read for the engine is read on its own devices. A faked
    GPU has no device behind it: the engine sees none and runs on the CPU.
    """
    if any(gpu.fake for gpu in gpus):
        return {"CUDA_VISIBLE_DEVICES": ""}
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(gpu.index) for gpu in gpus),
    }


def gpu_indices(gpus: list[Gpu] | None) -> list[int] | None:
    """The NVML indices to read memory on (None: what CUDA_VISIBLE_DEVICES leaves)."""
    if not gpus or any(gpu.fake for gpu in gpus):
        return None
    return [gpu.index for gpu in gpus]


def describe(gpus: list[dict[str, Any]] | None) -> str:
    """'GPU 0,1 (NVIDIA H200, 1980 MHz)' for a trial's recorded GPUs; '' for none."""
    if not gpus:
        return ""
    kinds = sorted({(g.get("name"), g.get("sm_clock_mhz")) for g in gpus}, key=str)
    what = "; ".join(f"{name}, {clock} MHz" if clock else str(name) for name, clock in kinds)
    indices = ",".join(str(g.get("index")) for g in gpus)
    return f"GPU {indices} ({what})"


def differs(trial_gpus: list[dict[str, Any]], reference_gpus: list[dict[str, Any]]) -> str | None:
    """Why a trial's GPUs are not comparable with the reference's (model or clock), or None."""
    if not trial_gpus or not reference_gpus:
        return None
    ref = reference_gpus[0]
    for gpu in trial_gpus:
        if gpu.get("name") != ref.get("name"):
            return f"ran on {gpu.get('name')}, the reference on {ref.get('name')}"
        if gpu.get("sm_clock_mhz") != ref.get("sm_clock_mhz"):
            return (
                f"ran at {gpu.get('sm_clock_mhz')} MHz SM clock, the reference at "
                f"{ref.get('sm_clock_mhz')} MHz"
            )
    return None
