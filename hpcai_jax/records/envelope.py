"""The envelope every record starts with (`results.envelope` builds it): identity, status,
configuration and provenance. docs/record.md lists the fields, docs/reliability.md says how a
record is written."""

from __future__ import annotations

import enum

from hpcai_jax.records.fields import field
from hpcai_jax.records.schema import section

SCHEMA_VERSION = 2


class Status(enum.StrEnum):
    """How a run ends, as its record's `status` says it; declared here only, so that a new
    status is one line (the `status` field below says what each means)."""

    COMPLETE = "complete"
    PARTIAL = "partial"
    INVALID = "invalid"
    SMALL_ARRAYS = "small_arrays"


STATUSES = tuple(s.value for s in Status)


@section
class Provenance:
    versions: dict[str, str] = field(
        "Python's version and those of the main packages installed (jax, jaxlib, flax, optax, "
        "numpy, tensorflow-datasets, orbax-checkpoint), by name"
    )
    git_commit: str = field(
        "the project's git commit, `+dirty` when files differ from it, or `unknown` outside a "
        "git checkout"
    )
    backend: str = field("JAX's default backend: cpu, gpu or tpu")
    device_kind: str = field("the first device's kind as JAX names it, e.g. NVIDIA H200")
    device_count: int = field("devices of the whole job, every process's", "devices")
    local_device_count: int = field("devices of process 0, the one that writes", "devices")
    process_count: int = field("JAX processes of the job", "processes")
    hostname: str = field("process 0's host name")
    hosts: list[str] = field(
        "each process's node by process index, as `hpcai_jax/nodes.py` names nodes (SLURM's "
        "node, a TPU worker's host, else the host name)"
    )
    number_of_nodes: int = field("distinct nodes among `provenance.hosts`, as MLPerf counts them")
    accelerators_per_node: int = field(
        "devices of the largest node (the devices of all its processes)", "devices"
    )
    platform: str = field("process 0's operating system, as Python's platform.platform() says")
    environment: dict[str, str] | None = field(
        "the XLA flags and environment variables set before the backend started "
        "(docs/gpu_settings.md); None in records older than it"
    )
    utc: str = field(
        "when the envelope was made, just before the record is written (UTC, ISO 8601)"
    )


@section
class Record:
    """The envelope; each mode's record adds its sections after these fields."""

    schema_version: int = field(
        f"the layout's version: {SCHEMA_VERSION} for this page's; a record without it is version "
        "1 and is read through the converter (Versions, above)"
    )
    run_id: str = field(
        "the run's id and its record's file name: `--run_name`, or MODE-UTC-PID when none is given"
    )
    mode: str = field("the mode that wrote the record: train, flops, stream or check")
    status: str = field(
        "complete, partial (preempted; a checkpoint lets it resume), invalid (diverged, failed "
        "its FLOP cross-check or STREAM validation: no score) or small_arrays (STREAM with "
        "arrays below the 4 × cache rule, `--allow_small_arrays`: shown marked, never scored)"
    )
    reason: str = field(
        "why the run is partial, invalid or small_arrays, or (check) which rows failed; empty "
        "otherwise"
    )
    config: dict = field(
        "the whole configuration as `Settings.to_dict()` gives it: every flag of hpcai_jax.main "
        "by section, with the data set's own values where a flag's 0 defers to it "
        "(`data.num_classes`, `data.image_size`); `hpcai_jax/config.py` documents each field "
        "(`--help` prints it)"
    )
    provenance: Provenance = field("what another site needs to reproduce the run")
