"""The JAX numerics of the step: the mesh and its layout, the members' stacked state, the train
and eval steps (shard_map over `ensemble` × `data`), how a device maps its members, the gradient
reduction, the optimizer, and a step compiled ahead of timing. Timing, FLOP counts, checkpoints
and the record are the layers above: flops/, telemetry/, run/ (docs/design.md)."""
