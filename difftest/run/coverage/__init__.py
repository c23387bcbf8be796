"""Changed-line coverage: what to trace in every probe (`tracing_job`), and which lines each
branch changes that its own probes executed (`changed_lines`, `judge`)."""
