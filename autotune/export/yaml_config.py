"""Render a configuration as YAML: every field, for review, diffing or a later `autotune` run."""

from __future__ import annotations

from typing import Any

import yaml

from .. import SCHEMA_VERSION
from ..params import TrialConfig
from .base import Export, ServeOptions


def render(config: TrialConfig, opts: ServeOptions) -> Export:
    """The whole configuration as a YAML document; `TrialConfig(**doc["config"])` rebuilds it."""
    server: dict[str, Any] = {"host": opts.host}
    for name in ("port", "served_model_name", "session_len"):
        value = getattr(opts, name)
        if value is not None:
            server[name] = value
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "model": opts.model,
        "backend": config.backend,
        # mode="json" keeps plain scalars, so safe_dump never needs a Python-specific tag.
        # engine_defaults too where it is off (the stored record leaves it out then).
        "config": {**config.model_dump(mode="json"), "engine_defaults": config.engine_defaults},
        "server": server,
    }
    document = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    return Export(format="yaml", argv=[], document=document)
