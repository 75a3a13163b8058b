"""The recommendation's throughput as a multiple of the reference's, with its interval.

Both figures come from load tests with intervals of their own: the recommendation's to
+-3% (launch spread included), the reference's often far wider, since a reference the deploy
target cannot run is measured only to +-10% or a short cap (autotune.study.run.reference_load).
The ratio carries both: two independent measurements, so on the log scale (where a ratio is
a difference) their relative half-widths add in quadrature, the delta method's first order
(autotune.study.results.gain.throughput_ratio, shared with the gain over the engine's
defaults). The reference is transformers in-process at batch 1, which nobody deploys: this
ratio is a detail line; the headline is the gain over the deploy target's defaults.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from optuna.trial import FrozenTrial

from autotune.study.results.gain import throughput_ratio


@dataclass(frozen=True)
class Ratio:
    times: float  # the recommendation's throughput over the reference's
    # The ratio's relative half-width (95%) on the log scale: from times / (1 + ci_rel) to
    # times * (1 + ci_rel). None: a figure has no interval.
    ci_rel: float | None
    reference_tokens_per_s: float
    reference_ci_rel: float | None

    def to_dict(self) -> dict[str, float | None]:
        return asdict(self)

    def words(self) -> str:
        """'74x (+-12%: 65-83x) the reference's 37.1 tok/s (+-8.3%)'."""
        if self.ci_rel is None:
            interval = " (no interval: a figure was measured too briefly)"
        else:
            low, high = self.times / (1 + self.ci_rel), self.times * (1 + self.ci_rel)
            interval = f" (±{self.ci_rel:.0%}: {low:.0f}-{high:.0f}×)"
        ref = f"{self.reference_tokens_per_s:.1f} tok/s"
        if self.reference_ci_rel is not None:
            ref += f" ±{self.reference_ci_rel:.1%}"
        return f"{self.times:.0f}×{interval} the reference's {ref}"


def versus_reference(trial: FrozenTrial, reference: FrozenTrial | None) -> Ratio | None:
    """`trial`'s throughput over the reference's; None without both figures (or for the
    reference itself)."""
    if reference is None or reference.number == trial.number:
        return None
    ratio = throughput_ratio(trial, reference)
    return None if ratio is None else Ratio(*ratio)
