"""Accuracy: scoring answers, the paired comparison with the reference, reuse and screening."""
