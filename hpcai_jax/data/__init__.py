"""Data sources (random access by index) and the pipeline that turns a member's bootstrap
indices into sharded device batches."""
