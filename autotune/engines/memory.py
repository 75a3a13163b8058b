"""Peak memory of a server's process tree, sampled while it runs.

A server's memory is spread over a launcher, the server and its helper processes, and none of
them reports a peak we can read afterwards, so a thread samples the whole tree: RSS summed over
the processes on the CPU, their per-process GPU memory through NVML on a GPU.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

import psutil


def tree_pids(root_pid: int) -> set[int]:
    """The root and all its descendants that still exist."""
    try:
        root = psutil.Process(root_pid)
        return {root_pid, *(child.pid for child in root.children(recursive=True))}
    except psutil.Error:
        return set()


def tree_rss_mib(pids: set[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(pid).memory_info().rss
    return total / 2**20


class _Nvml:
    """Per-process GPU memory on every device, or a device-wide delta where NVML cannot attribute.

    Inside a container NVML may report host pids that match none of ours; then the growth of
    used memory on all devices since the server started is the best figure left.
    """

    def __init__(self, devices: list[int] | None = None) -> None:
        import pynvml  # nvidia-ml-py: only imported on machines that may have a GPU

        pynvml.nvmlInit()
        self.nvml: Any = pynvml
        count = pynvml.nvmlDeviceGetCount()
        if count == 0:
            pynvml.nvmlShutdown()
            raise RuntimeError("NVML sees no GPU")
        self.handles = (
            [pynvml.nvmlDeviceGetHandleByIndex(i) for i in devices if i < count]
            if devices
            else self._visible_handles(count)
        )
        self.baseline = self._device_used()

    def _visible_handles(self, count: int) -> list[Any]:
        """The devices CUDA_VISIBLE_DEVICES leaves to the engine (all when unset): an engine
        pinned to one GPU is read there only, never charged for its neighbours' memory."""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None or not visible.strip():
            return [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        handles = []
        for entry in (part.strip() for part in visible.split(",")):
            if entry.isdigit() and int(entry) < count:
                handles.append(self.nvml.nvmlDeviceGetHandleByIndex(int(entry)))
            elif entry.startswith(("GPU-", "MIG-")):
                handles.append(self.nvml.nvmlDeviceGetHandleByUUID(entry))
        return handles

    def _device_used(self) -> int:
        return sum(self.nvml.nvmlDeviceGetMemoryInfo(h).used for h in self.handles)

    def sample_mib(self, pids: set[int]) -> tuple[float, str]:
        attributed = 0
        matched = False
        for handle in self.handles:
            for proc in self.nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid in pids and proc.usedGpuMemory is not None:
                    attributed += proc.usedGpuMemory
                    matched = True
        if matched:
            return attributed / 2**20, "nvml"
        return max(0, self._device_used() - self.baseline) / 2**20, "nvml_device_delta"

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()


class MemorySampler:
    """Samples the tree under `root_pid` every `interval_s` until stopped; keeps the peak."""

    def __init__(
        self,
        root_pid: int,
        *,
        use_gpu: bool,
        devices: list[int] | None = None,
        interval_s: float = 0.25,
    ) -> None:
        """`devices`: the NVML indices the engine was pinned to (autotune run --gpus)."""
        self.root_pid = root_pid
        self.interval_s = interval_s
        self.peak_mib = 0.0
        self.window_peak_mib = 0.0  # since the last reset_window(): one trial on a launch
        self.source = "rss_tree"
        self.nvml: _Nvml | None = None
        if use_gpu:
            try:
                self.nvml = _Nvml(devices)
                self.source = "nvml"
            except Exception:  # no driver, no GPU, no pynvml: the host RSS is what is left
                self.nvml = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="memory-sampler")

    def start(self) -> MemorySampler:
        self._thread.start()
        return self

    def sample(self) -> None:
        pids = tree_pids(self.root_pid)
        if not pids:
            return
        if self.nvml is not None:
            try:
                value, source = self.nvml.sample_mib(pids)
            except Exception:  # a process vanished between listing and reading, or NVML hiccup
                return
        else:
            value, source = tree_rss_mib(pids), "rss_tree"
        if value >= self.peak_mib:
            self.peak_mib, self.source = value, source
        if value >= self.window_peak_mib:
            self.window_peak_mib = value

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def reset_window(self) -> None:
        """Start a new per-trial peak, from what the tree holds right now."""
        self.window_peak_mib = 0.0
        self.sample()

    def window_peak(self) -> tuple[float, str]:
        """The peak since the last reset_window() (one last sample first), and its source."""
        self.sample()
        return self.window_peak_mib, self.source

    def stop(self) -> tuple[float, str]:
        """Stop sampling (one last sample first); returns (peak MiB, source)."""
        if self._thread.is_alive():
            self.sample()
            self._stop.set()
            self._thread.join(timeout=5)
        if self.nvml is not None:
            self.nvml.close()
        return self.peak_mib, self.source
