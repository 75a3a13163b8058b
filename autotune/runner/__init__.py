"""Running engines outside the study process: a worker per trial, or a server per trial."""
