"""The engine: one SPMD program that trains, evaluates, times, counts, checkpoints and records
M bagged members of any workload (hpcai_jax/workloads/)."""
