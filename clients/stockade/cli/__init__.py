"""The `stockade` command line."""
