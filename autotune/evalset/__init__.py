"""Evaluation sets: loading and validation, scoring metrics, and the synthetic generators."""

from __future__ import annotations

from autotune.evalset.dataset import EvalItem, EvalSet, load_evalset, summary
from autotune.evalset.metrics import METRICS, get_metric

__all__ = ["METRICS", "EvalItem", "EvalSet", "get_metric", "load_evalset", "summary"]
