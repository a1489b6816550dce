"""How a job is laid out: layouts, pipeline layouts and schedules, framework profiles."""
