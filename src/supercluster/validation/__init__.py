"""The cost model against published runs: per-row error, evidence lines."""
