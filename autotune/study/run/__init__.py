"""The run-time of a study: the plan, the Optuna loop and its objective, launches, GPUs,
budget, racing and the judging and recording of each trial."""
