"""Equal work: whether a load test's answers had the length the load test forced.

With `workload.output_tokens` every load-test request asks for an answer of a set length
(min_tokens / ignore_eos on servers, min_new_tokens in-process), so trials do the same work and
their tokens per second compare. An engine that ignores those fields answers as long as it
likes: an endpoint answering 10 tokens whatever was asked was measured and recommended as if it
had done the forced work (issue 30). Each trial's answers are therefore compared with what was
asked of them; a trial outside the tolerance is recorded as unequal work and never ranked with
the others on tokens per second (autotune.study.results.select).
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.measure.lengths import AnswerLengths
from autotune.measure.timing import RequestTiming

# How far the tokens the answers held may stray from the tokens forced, relative: a server
# that does the forced work matches it to the token (usage counts the generated tokens); 5%
# leaves room for one that counts a stop token, or streams several tokens per chunk without
# a usage count, and is far from an engine that ignores the forcing (10 of 128 tokens: 8%).
FORCED_LENGTH_TOLERANCE_REL = 0.05
# The trial attributes: the ratio (a figure), and why the work was unequal (only when it was).
RATIO = "forced_output_tokens_ratio"
UNEQUAL_WORK = "unequal_work"


def forced_length_ratio(
    timings: Sequence[RequestTiming], *, mean: int, spread: float
) -> float | None:
    """The tokens the load test's answers held over the tokens it forced; None without any.

    Request k, in start order, asked for the k-th length of AnswerLengths(mean, spread)
    (autotune.measure.lengths), and every request started drained before the load returned:
    the n timings asked for the first n lengths together, whatever order they ended in.
    In-process answers all asked for `mean` (spread 0)."""
    if not timings:
        return None
    lengths = AnswerLengths(mean, spread)
    asked = sum(lengths.next() for _ in timings)
    return sum(timing.output_tokens for timing in timings) / asked


def unequal_work(ratio: float | None, *, mean: int, engine: str) -> str | None:
    """Why a trial's work was not the forced work (None when it was, within the tolerance)."""
    if ratio is None or abs(ratio - 1.0) <= FORCED_LENGTH_TOLERANCE_REL:
        return None
    return (
        f"{engine} ignored the forced answer length: its load-test answers held {ratio:.0%} of "
        f"the {mean} tokens forced per answer (tolerance {FORCED_LENGTH_TOLERANCE_REL:.0%}), "
        "so its tokens/s is not the work the other trials did"
    )
