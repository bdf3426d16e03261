"""BabelStream-style memory-bandwidth benchmark in JAX (`--mode=stream`, docs/design.md §2).

Modules, one job each: config (flag checks), sizing (the arrays' size), placement (devices and
sharding), cache (the 4x-cache size rule), kernels (compiled donated kernels), runner (timing),
validate (BabelStream's check), measured (what a run measured), report (table, CSV, figures),
printed (what the mode prints), record (its JSON record), benchmark (the run, end to end).
"""

__all__ = ["StreamResult", "measure_bandwidth", "run_stream"]


def __getattr__(name: str):
    """The benchmark's names, imported on first use: `config` imports `stream.config`, which
    must not load JAX (nor `benchmark`, which imports `config` back)."""
    if name in __all__:
        from hpcai_jax.stream import benchmark

        return getattr(benchmark, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
