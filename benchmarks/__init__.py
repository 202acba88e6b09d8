"""Benchmarks of the registered model families (see benchmarks/README.md)."""
