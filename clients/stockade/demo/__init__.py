"""Assets of the scripted demo session (script and workspace files)."""
