"""From step time to time-to-train: failures, checkpoints, goodput, the run ledger."""
