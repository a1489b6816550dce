"""Model architectures: the schema (ModelSpec) and the preset catalog."""
