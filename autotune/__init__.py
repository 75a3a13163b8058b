"""autotune: find the fastest accurate way to serve a vision-language model."""

from __future__ import annotations

__version__ = "0.1.0"
SCHEMA_VERSION = 1  # bumped when the stored trial attributes change meaning

__all__ = ["SCHEMA_VERSION", "__version__"]
