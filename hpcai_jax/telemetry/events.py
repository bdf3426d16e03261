"""TensorBoard event files that can never stop a run (docs/observe.md).

The events are tensorboardX's (protobuf only, no TensorFlow): its scalar summaries written
through its synchronous `EventsWriter`, on the caller's thread. Its `SummaryWriter` is not used:
that one writes from a thread fed by a bounded queue, and a full disk kills the thread, after
which the queue fills and the training loop blocks for ever on the next scalar. Here the first
failed write (a read-only or full directory) logs one warning line and ends the writing; what was
lost is counted for the record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time

from absl import logging


@dataclasses.dataclass
class EventLog:
    """Scalars into `<directory>/events.out.tfevents.*`; `lost` says why writing stopped."""

    directory: str
    asked: int = 0  # scalars handed to `scalar`
    on_disk: int = 0  # of which handed to the file system by the last successful flush
    lost: str | None = None
    _writer: object = dataclasses.field(default=None, repr=False)

    @classmethod
    def open(cls, directory: str) -> EventLog:
        log = cls(directory)
        try:
            from tensorboardX.event_file_writer import EventsWriter

            os.makedirs(directory, exist_ok=True)
            log._writer = EventsWriter(os.path.join(directory, "events"))
        except (OSError, ImportError) as e:
            log._fail(f"could not open TensorBoard events in {directory}: {e}")
        return log

    def scalar(self, tag: str, value: float | None, step: int) -> None:
        """One point of a curve; None (a figure undefined here, such as R² over one held-out
        example) writes no point."""
        if value is None:
            return
        self.asked += 1
        if self._writer is None:
            return
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.summary import scalar

        event = Event(summary=scalar(tag, float(value)), wall_time=time.time(), step=int(step))
        try:
            self._writer.write_event(event)
        except OSError as e:
            self._fail(f"could not write TensorBoard events in {self.directory}: {e}")

    def flush(self) -> None:
        """Hands the buffered events to the file system (after an evaluation, an epoch)."""
        if self._writer is None:
            return
        try:
            self._writer.flush()
        except OSError as e:
            self._fail(f"could not flush TensorBoard events in {self.directory}: {e}")
            return
        self.on_disk = self.asked

    def close(self) -> None:
        self.flush()
        self._close_quietly()

    def _close_quietly(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:  # a failed flush or write was already said
            with contextlib.suppress(OSError):
                writer._py_recordio_writer.close()

    def _fail(self, why: str) -> None:
        """One warning line; the run goes on without curves."""
        logging.warning("%s; the run goes on without TensorBoard curves", why)
        self.lost = why
        self._close_quietly()

    def summary(self) -> dict:
        """What the record says: where the events are and what was lost."""
        return {
            "dir": os.path.abspath(self.directory),
            "scalars_written": self.on_disk,
            "scalars_lost": self.asked - self.on_disk,
            "lost": self.lost,
        }
