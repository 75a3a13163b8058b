"""Developer tools for autotune (test-checkpoint builders and the like); not part of the package."""
