"""Engines outside the study process: in-process workers, server commands, endpoints."""
