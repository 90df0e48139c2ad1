"""Benchmarks: `make bench` runs every bench_*.py module and writes bench-results.json."""
