"""Benchmarks and datasets from their sources, adapted into Harbor task folders."""
