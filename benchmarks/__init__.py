"""Benchmark scripts; each is run alone (`python -m benchmarks.<name>`) and writes its section of BENCHMARKS.md."""
