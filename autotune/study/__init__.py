"""The run-time of a study: planning, the Optuna loop, its trials, progress and storage."""

from autotune.study.loop import StudyPlan, plan_study, run_study

__all__ = ["StudyPlan", "plan_study", "run_study"]
