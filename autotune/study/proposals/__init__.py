"""The proposal policy: what a study measures next (the queued reference and candidates, the
incumbent's one-lever steps, the covering start-up, the sampler and its steering)."""
