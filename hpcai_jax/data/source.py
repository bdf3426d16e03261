"""What every data set offers the pipeline: random access by example index, to named arrays.

An example is a dict of arrays (its *fields*, e.g. {"image": uint8 [H, W, C], "label": int32 []});
a spec names each field's shape and dtype, so the engine can build sharded batches [M, B, ...]
and [E, ...] of any workload without knowing what the fields mean. Images stay uint8 on the
host and over the wire; workloads normalise them on the device.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np

Fields = dict[str, tuple[tuple[int, ...], str]]  # field name → (shape of one example, dtype)


class DataSpec(Protocol):
    name: str

    @property
    def fields(self) -> Fields: ...


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """An image-classification set; mean and std per channel, in 0..255 units."""

    name: str
    image_shape: tuple[int, int, int]  # H, W, C
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @property
    def fields(self) -> Fields:
        return {"image": (tuple(self.image_shape), "uint8"), "label": ((), "int32")}


class Source(Protocol):
    spec: DataSpec

    def __len__(self) -> int: ...

    def read(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """The examples at `indices`: every field of spec.fields, with a leading [n] axis."""

    def head(self, n: int) -> Source:
        """The first n examples (n = 0: all)."""

    # Optional: train_reader() -> a picklable data.workers.TrainReader. A source that has one
    # (tfds image sets) is read for training in worker processes, with per-example augmentation
    # keys; sources without one are read directly (data/pipeline.py).


@dataclasses.dataclass(frozen=True)
class ArraySource:
    """A data set held in host memory (Fashion-MNIST is 47 MB): reads are fancy indexing."""

    spec: DataSpec
    arrays: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values())))

    def read(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        return {name: array[indices] for name, array in self.arrays.items()}

    def head(self, n: int) -> ArraySource:
        """The first n examples (n = 0: all): views, not copies."""
        if n == 0 or n >= len(self):
            return self
        return ArraySource(self.spec, {name: a[:n] for name, a in self.arrays.items()})
