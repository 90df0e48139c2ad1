"""The executor service: path sandbox, bash analysis, confinement and tools."""
