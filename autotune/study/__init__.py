"""The run-time of a study: planning, the Optuna loop, launches, budget, progress and storage."""

from autotune.study.plan import StudyPlan, plan_study
from autotune.study.results.counting import counted_trials
from autotune.study.run.loop import run_study
from autotune.study.start.opening import open_study

__all__ = ["StudyPlan", "counted_trials", "open_study", "plan_study", "run_study"]
