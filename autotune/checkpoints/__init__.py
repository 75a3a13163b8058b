"""Where a study's weights come from: a local folder, the hub, or random weights of the real
architecture (`--dummy-weights`)."""
