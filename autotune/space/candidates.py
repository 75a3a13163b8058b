"""A space's named candidates, found by name and made into configurations once each.

An --enqueue file may hold tens of thousands of candidates: a scan of the list for every
lookup, and each configuration made again for every use, would cost time quadratic in them.
Here a lookup is one dict read, and a configuration is made on first use and kept.
"""

from __future__ import annotations

from autotune.params import SERVER_BACKENDS, TrialConfig, clear_unused_launch_params
from autotune.space.settings import Candidate


class NamedCandidates:
    """`candidates` by name, and their configurations over `reference`; a server that does not
    search max_batch_size gets `server_max_batch_size` (SearchSpace.server_max_batch_size)."""

    def __init__(
        self, candidates: list[Candidate], reference: TrialConfig, server_max_batch_size: int
    ) -> None:
        self.by_name = {candidate.name: candidate for candidate in candidates}
        self.reference = reference
        self.server_max_batch_size = server_max_batch_size
        self.configs: dict[str, TrialConfig] = {}  # those made so far, by name

    def config(self, name: str) -> TrialConfig:
        """The candidate named `name`: its values over the reference's; KeyError for none."""
        config = self.configs.get(name)
        if config is None:
            candidate = self.by_name.get(name)
            if candidate is None:
                raise KeyError(f"no candidate named {name!r}")
            config = self.configs[name] = self.make(candidate)
        return config

    def make(self, candidate: Candidate) -> TrialConfig:
        """`candidate`'s configuration: its values over the reference's, the sampling knobs
        only if it samples (ValidationError for values TrialConfig refuses)."""
        values = self.reference.model_dump()
        if not candidate.config.get("do_sample", values["do_sample"]):
            values.update(temperature=None, top_k=None, top_p=None)
        values.update(candidate.config)
        if values["backend"] in SERVER_BACKENDS and values.get("max_batch_size") is None:
            values["max_batch_size"] = self.server_max_batch_size
        clear_unused_launch_params(values)
        return TrialConfig(**values)
