"""Timings, percentiles and the registry of recorded metrics."""
