"""Showing a study: the `best` table, the HTML report and optuna-dashboard."""
