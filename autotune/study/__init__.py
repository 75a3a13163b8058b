"""The run-time of a study: planning, the Optuna loop, launches, budget, progress and storage."""

from autotune.study.counting import counted_trials
from autotune.study.loop import open_study, run_study
from autotune.study.plan import StudyPlan, plan_study

__all__ = ["StudyPlan", "counted_trials", "open_study", "plan_study", "run_study"]
