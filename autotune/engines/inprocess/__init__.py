"""In-process engines: a worker process that loads the model once and measures trial after
trial (it imports torch; the study process never does)."""
