"""The records every mode writes: their definitions, their one reader and their writer
(write.py: the file's claim and atomic write; docs/record.md).

    records.read(path or JSON object) -> TrainRecord | StreamRecord | FlopsRecord | CheckRecord
    records.to_dict(record) -> its JSON layout

Below every mode and tool: it imports neither JAX nor the engine, so a report reads records
anywhere they are copied to.
"""

from hpcai_jax.records.envelope import SCHEMA_VERSION, STATUSES, Provenance, Record, Status
from hpcai_jax.records.flops import FlopsRecord
from hpcai_jax.records.nodecheck import CheckRecord
from hpcai_jax.records.read import KINDS, AnyRecord, load, read
from hpcai_jax.records.schema import RecordError, to_dict
from hpcai_jax.records.stream import StreamRecord
from hpcai_jax.records.train import TrainRecord

__all__ = [
    "KINDS",
    "SCHEMA_VERSION",
    "STATUSES",
    "AnyRecord",
    "CheckRecord",
    "FlopsRecord",
    "Provenance",
    "Record",
    "RecordError",
    "Status",
    "StreamRecord",
    "TrainRecord",
    "load",
    "read",
    "to_dict",
]
