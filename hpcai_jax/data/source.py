"""What every image data set offers the pipeline: random access by example index.

Images stay uint8 on the host and over the wire; the step normalises them on the device with
the source's per-channel mean and std (in 0..255 units).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import numpy as np


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    name: str
    image_shape: tuple[int, int, int]  # H, W, C
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]


class ImageSource(Protocol):
    spec: ImageSpec

    def __len__(self) -> int: ...

    def read(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Returns uint8 images [n, H, W, C] and int32 labels [n] for the given indices."""


@dataclasses.dataclass(frozen=True)
class ArraySource:
    """A data set held in host memory (Fashion-MNIST is 47 MB): reads are fancy indexing."""

    spec: ImageSpec
    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def read(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.images[indices], self.labels[indices]

    def head(self, n: int) -> ArraySource:
        """The first n examples (n = 0: all): a view, not a copy."""
        if n == 0 or n >= len(self):
            return self
        return ArraySource(self.spec, self.images[:n], self.labels[:n])
