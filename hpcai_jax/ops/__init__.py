"""Low-level JAX operations the models and the engine share (below both)."""
