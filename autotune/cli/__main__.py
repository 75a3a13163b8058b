"""`python -m autotune.cli`: what the `autotune` script runs (workers are started this way)."""

from autotune.cli import main

main()
