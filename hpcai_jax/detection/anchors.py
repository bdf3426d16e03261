"""Anchor boxes for the ExtremeWeather classes, as a static numpy array.

Sizes are chosen at the full 768 × 1152 grid and scaled with the image (heights by H/768, widths
by W/1152), so a downscaled image keeps the anchors matched to its events:

- sizes (square root of the area) 32, 64, 128, 256 px: tropical depressions and cyclones are
  compact (boxes of a few tens of px), extratropical cyclones a few hundred px across;
- aspect ratios h/w 1/4, 1/2, 1, 2, 4: cyclones are round (1), atmospheric rivers are long and
  thin bands (several hundred px by tens) whose boxes run 2–4 : 1 along their mostly zonal, at
  times meridional axis, so both wide and tall shapes are needed. A 500 × 150 px band box
  meets the 256-px 1:4 anchor (128 × 512) at IoU 0.84.

Larger or finer sets only change `AnchorSpec`; the RPN sizes its outputs from `per_location`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

FULL_SHAPE = (768, 1152)  # ExtremeWeather's grid (y, x), the scale the sizes are given at


@dataclasses.dataclass(frozen=True)
class AnchorSpec:
    sizes: tuple[float, ...] = (32.0, 64.0, 128.0, 256.0)  # full-resolution px, √area
    aspect_ratios: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0)  # height / width

    @property
    def per_location(self) -> int:
        return len(self.sizes) * len(self.aspect_ratios)


def anchor_grid(
    image_hw: tuple[int, int], stride: int, spec: AnchorSpec = AnchorSpec()
) -> np.ndarray:
    """Anchors [h·w·k, 4] (ymin, xmin, ymax, xmax in pixels) for a feature map of `stride`.

    Ordered (row, column, anchor) to match the RPN's [B, h, w, k] outputs flattened. Each cell's
    anchors are centred on the cell, (i + 0.5) × stride: the centre of the pixels it covers.
    """
    height, width = image_hw
    fh, fw = -(-height // stride), -(-width // stride)  # SAME-padded strided convolutions
    sy, sx = height / FULL_SHAPE[0], width / FULL_SHAPE[1]
    size = np.asarray(spec.sizes, np.float64)[:, None]
    ratio = np.asarray(spec.aspect_ratios, np.float64)[None, :]
    h = (size * np.sqrt(ratio) * sy).reshape(-1)  # [k], sizes major
    w = (size / np.sqrt(ratio) * sx).reshape(-1)
    cy = (np.arange(fh) + 0.5) * stride
    cx = (np.arange(fw) + 0.5) * stride
    cy, cx = np.meshgrid(cy, cx, indexing="ij")
    cy, cx = cy[..., None], cx[..., None]  # [fh, fw, 1]
    boxes = np.stack(
        np.broadcast_arrays(cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2), axis=-1
    )  # [fh, fw, k, 4]
    return boxes.reshape(-1, 4).astype(np.float32)
