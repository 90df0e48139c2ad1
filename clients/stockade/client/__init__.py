"""Typed clients for the Stockade services (async first, with a small sync facade)."""
