"""Text for people: durations, sizes, control characters made visible, approval summaries."""
