"""The example ToolProvider: an in-memory astronomy paper catalogue (AGT-1 remote tools)."""
