"""Sets up JAX for the whole suite before it starts: 8 host CPU devices, so meshes have 8
devices in every test; fast compiles; one compilation cache for every process of the run.

The suite's time is compilation: on these tiny models XLA:CPU spends most of a step's compile in
LLVM's optimisation passes, which buy nothing at test sizes. The tests compile at backend
optimisation level 0 (3-6× faster here, same programs, same results within float tolerance);
benchmarks and real runs keep XLA's defaults. The persistent cache lets a subprocess that
compiles a program another test already compiled (the CLI tests run the same configurations)
load it instead. Subprocesses inherit both through the environment (`helpers.subprocess_env`).
"""

import os
import tempfile

FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"

if "HPCAI_JAX_TEST_ENV" not in os.environ:  # set once, by the first process (xdist's controller)
    os.environ["HPCAI_JAX_TEST_ENV"] = "1"
    os.environ["XLA_FLAGS"] = (
        f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE} "
        "--xla_force_host_platform_device_count=8"
    ).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault(
        "JAX_COMPILATION_CACHE_DIR", tempfile.mkdtemp(prefix="hpcai_jax_test_xla_cache_")
    )
