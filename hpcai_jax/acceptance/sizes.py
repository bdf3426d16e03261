"""The sizes the acceptance runs at: the real ones for an accelerator, and toy ones (`--smoke`)
that run every item of the same code on a CPU in CI within a minute or two."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Sizes:
    model: str  # the flagship classifier
    image_size: int
    batch_size: int  # images per device per step, whatever the members per device
    dtype: str
    members_per_device: tuple[int, ...]  # besides 1, under each way of running them
    detector_model: str
    detector_image_size: int
    detector_batch_size: int
    stream_mib: float | None  # MiB per array; None: from the device's memory and cache
    stream_times: int
    stream_precision: str
    matmul_size: int | None  # None: the peak routine's own size for the backend
    matmul_budget_s: float | None  # at most this for the three dtypes; None: the group's share
    dtype_batch_size: int
    input_images: int  # distinct JPEGs the input item decodes round and round
    input_window_s: float  # how long every core decodes
    max_steps: int  # timed steps per training item, at most


FULL = Sizes(
    model="resnet50",
    image_size=224,
    batch_size=128,
    dtype="bfloat16",
    members_per_device=(2, 4, 16),
    # One GPU's share of a member at P_degree = 8 (configs/extreme_weather.flags: 16 per member).
    detector_model="faster_rcnn_resnet50",
    detector_image_size=768,
    detector_batch_size=2,
    stream_mib=None,
    stream_times=100,
    stream_precision="float64",
    matmul_size=None,
    matmul_budget_s=None,
    dtype_batch_size=8,
    input_images=256,
    input_window_s=10.0,
    max_steps=20,
)

SMOKE = Sizes(
    model="resnet_small",
    image_size=32,
    batch_size=8,
    dtype="bfloat16",
    # One count: every variant's code runs at 2 members as at 4 (the 4-member builds were a third
    # of the smoke's time in CI).
    members_per_device=(2,),
    detector_model="faster_rcnn_small",
    detector_image_size=64,
    detector_batch_size=2,
    stream_mib=4.0,
    stream_times=5,
    stream_precision="float64",
    matmul_size=128,
    matmul_budget_s=3.0,
    dtype_batch_size=4,
    input_images=8,
    input_window_s=1.0,
    max_steps=3,
)
