"""Reports people can read and compare: a markdown report with PNG plots from records, and two
records side by side.

    python -m hpcai_jax.report RESULTS... [--out DIR]
    python -m hpcai_jax.report --compare A B [--out DIR]

It reads the JSON records only (no JAX, no device), so records copied off a cluster can be
reported anywhere. `write_report` and `compare` are the Python API (`hpcai_jax.sweep` calls the
first at the end of a sweep).
"""

from hpcai_jax.report.build import write_report
from hpcai_jax.report.compare import compare

__all__ = ["compare", "write_report"]
