"""In-process engines that the worker process runs (they import torch)."""
