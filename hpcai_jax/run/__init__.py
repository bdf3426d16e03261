"""The training run around the compiled step: its loop and clock, checkpoints, preemption,
progress, epochs, the quality curve and the record (docs/design.md)."""
