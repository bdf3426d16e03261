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
    # The members group (acceptance/members.py): (M, B) of the layer table, most wanted first,
    # and of the whole `member_model` step (at 28²) under every --member_map form.
    member_layer_grid: tuple[tuple[int, int], ...]
    member_step: tuple[int, int]
    member_model: str
    member_layers: tuple[int, ...]  # indices into member_layers.LAYERS
    member_forms: tuple[str, ...] | None  # --member_map forms of the whole step; None: all
    member_calls: int  # calls per timing sample of a layer
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
    member_layer_grid=((16, 32), (4, 32), (16, 128), (4, 128)),
    member_step=(16, 32),
    member_model="resnet_small",
    member_layers=(0, 1, 2, 3),
    member_forms=None,
    member_calls=5,
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

# The smoke's classifier is resnet_tiny: resnet_small's every block kind in fewer ops, so that
# its six whole-step compiles (train, members, dtypes) are what CI can afford; the code is the
# same at any model.
SMOKE = Sizes(
    model="resnet_tiny",
    image_size=32,
    batch_size=8,
    dtype="bfloat16",
    # Every formulation's code at 2 members as at 16; a strided 3×3 and a 1×1 layer (every
    # layer is the same code), the default form and the one-kernel-per-layer one in the step.
    member_layer_grid=((2, 2),),
    member_step=(2, 4),
    member_model="resnet_tiny",
    member_layers=(1, 2),
    member_forms=("scan", "batched"),
    member_calls=1,
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
