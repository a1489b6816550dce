"""GPUs and systems (data/gpus.toml, data/systems.toml), each figure with its source."""
