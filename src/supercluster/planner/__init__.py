"""The fastest layout that fits: search, sweeps, sensitivity."""
