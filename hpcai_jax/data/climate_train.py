"""The climate sets' training read: each example's sampling key and its optional latitude flip,
made where the examples are read (grain worker processes, data/workers.py, or in-process).

The key makes the detector's fresh per-step sampling a pure function of (seed, member, step,
example), the same on every process and after a resume; the flip is north-south because only
that mirror leaves each cyclone turning the way its hemisphere wants. Both are specified in
`docs/detection.md` (The detector; Augmentation).

This module must not import jax: the reader runs in grain's spawned workers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from hpcai_jax.data.climate import CHANNELS

SAMPLE_KEY = "sample_key"
_TAG = 0x636C696D  # "clim": keeps these streams apart from the image sets' augmentation keys
# Signed by a north-south mirror: the meridional (northward) wind components.
MERIDIONAL_WIND = tuple(CHANNELS.index(name) for name in ("V850", "VBOT"))


def example_words(keys: np.ndarray) -> np.ndarray:
    """uint32 [n, 3] from augmentation keys int64 [n, 4] (seed, member, epoch, slot): words 0
    and 1 are the sample_key, bit 0 of word 2 the flip."""
    keys = np.asarray(keys, np.int64).reshape(-1, 4)
    out = np.empty((len(keys), 3), np.uint32)
    for i, key in enumerate(keys):
        out[i] = np.random.SeedSequence([_TAG, *(int(k) for k in key)]).generate_state(3)
    return out


def zero_keys(n: int) -> np.ndarray:
    """The sample_key of reads outside training."""
    return np.zeros((n, 2), np.uint32)


def flip_latitude(
    image: np.ndarray, boxes: np.ndarray, flip: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Examples where `flip` (bool [n]) mirrored north-south: image [n, H, W, C] rows reversed
    with V850 and VBOT negated, boxes [n, G, 4] (ymin, xmin, ymax, xmax; padding rows -1) with
    y → H - y (pixel i covers [i, i + 1)). New arrays; the others rows unchanged."""
    image, boxes = image.copy(), boxes.copy()
    height = image.shape[1]
    for i in np.flatnonzero(flip):
        image[i] = image[i, ::-1]
        image[i][..., list(MERIDIONAL_WIND)] *= -1
        real = boxes[i, :, 0] >= 0
        b = boxes[i, real]
        boxes[i, real] = np.stack([height - b[:, 2], b[:, 1], height - b[:, 0], b[:, 3]], -1)
    return image, boxes


@dataclasses.dataclass(frozen=True)
class ClimateTrainReader:
    """data.workers.TrainReader of a climate source: its examples with their sample keys,
    flipped where asked. Picklable when its source is (the file-backed ones pickle their
    paths, not their data)."""

    source: Any  # a climate Source: read(indices) → image, boxes, classes, sample_key
    flip: bool = False
    # An in-memory source gains nothing from workers (its read is indexing) and would be copied
    # into each: the pipeline then reads in the training process unless told otherwise.
    in_memory: bool = False

    def __call__(self, indices: np.ndarray, keys: np.ndarray) -> dict[str, np.ndarray]:
        out = dict(self.source.read(indices))
        words = example_words(keys)
        out[SAMPLE_KEY] = words[:, :2].copy()
        if self.flip:
            out["image"], out["boxes"] = flip_latitude(
                out["image"], out["boxes"], (words[:, 2] & 1).astype(bool)
            )
        return out


@dataclasses.dataclass(frozen=True)
class ClimateTrainSet:
    """A climate training source with its training read (`train_reader`): what the pipeline
    reads training batches through; `read` (out-of-bag evaluation) is the source's own."""

    source: Any
    flip: bool = False
    in_memory: bool = False

    @property
    def spec(self):
        return self.source.spec

    def __len__(self) -> int:
        return len(self.source)

    def read(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        return self.source.read(indices)

    def head(self, n: int) -> ClimateTrainSet:
        return dataclasses.replace(self, source=self.source.head(n))

    def train_reader(self) -> ClimateTrainReader:
        return ClimateTrainReader(self.source, self.flip, self.in_memory)
