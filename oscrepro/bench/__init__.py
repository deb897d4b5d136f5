"""Throughput / latency / memory / parameter-count benchmarks of attention mechanisms vs softmax (one process)."""

from oscrepro.bench.harness import paper_batch, peak_memory_mb, render_markdown, run_bench, write_csv

__all__ = ["paper_batch", "peak_memory_mb", "render_markdown", "run_bench", "write_csv"]
