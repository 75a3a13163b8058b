"""A space's named candidates (autotune.space.candidates): each found by name and made into
its configuration once, over the reference's values."""

from __future__ import annotations

import pytest

from autotune.params import TrialConfig
from autotune.space.candidates import NamedCandidates
from autotune.space.settings import Candidate


def test_a_candidate_is_made_over_the_reference_once_and_kept() -> None:
    named = NamedCandidates(
        [Candidate(name="small", config={"image_max_side": 128})],
        TrialConfig(batch_size=2),
        server_max_batch_size=8,
    )
    made = named.config("small")
    assert (made.image_max_side, made.batch_size, made.backend) == (128, 2, "transformers")
    assert named.config("small") is made  # a lookup makes nothing again
    assert named.by_name["small"].config == {"image_max_side": 128}
    with pytest.raises(KeyError, match="no candidate named 'large'"):
        named.config("large")


def test_a_greedy_server_candidate_drops_the_sampling_knobs_and_gets_the_batch_cap() -> None:
    """A server's batch cap, unless the candidate sets one, is the space's largest batch: every
    concurrency the space measures fits in the launch."""
    named = NamedCandidates(
        [
            Candidate(name="greedy", config={"backend": "lmdeploy", "do_sample": False}),
            Candidate(name="capped", config={"backend": "lmdeploy", "max_batch_size": 4}),
        ],
        TrialConfig(do_sample=True, temperature=0.7, top_k=20),
        server_max_batch_size=8,
    )
    greedy = named.config("greedy")
    assert (greedy.do_sample, greedy.temperature, greedy.top_k) == (False, None, None)
    assert greedy.max_batch_size == 8
    capped = named.config("capped")
    assert (capped.do_sample, capped.temperature, capped.max_batch_size) == (True, 0.7, 4)
