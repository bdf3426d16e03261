"""hpcai_jax: the HPC AI500 V3.0 bagged-ensemble benchmark and a BabelStream-style bandwidth
benchmark, as one SPMD JAX program."""

__version__ = "0.1.0"
