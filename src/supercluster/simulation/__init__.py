"""One step laid out on the pipeline schedule: a timeline, its trace."""
