"""Benchmarks, grouped by what they measure; ``python -m bench`` lists them. Never imported by
the service: speed and memory claims live here, each printed as medians over repeated runs."""
