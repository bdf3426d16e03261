"""BabelStream-style memory-bandwidth benchmark in JAX (`--mode=stream`, docs/design.md §2).

Modules, one job each: config (flag checks, array size), placement (devices and sharding),
cache (the 4x-cache size rule), kernels (compiled donated kernels), runner (timing), validate
(BabelStream's check), report (table, CSV, record), benchmark (the run, end to end).
"""

from hpcai_jax.stream.benchmark import StreamResult, measure_bandwidth, run_stream

__all__ = ["StreamResult", "measure_bandwidth", "run_stream"]
