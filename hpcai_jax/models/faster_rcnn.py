"""Faster R-CNN (Ren et al. 2015) in the C4 layout of He et al. 2016, with static shapes.

One member's detector, staged (`rpn`, `propose`, `head`, `detect`) so that an ensemble's members
can be averaged on shared proposals; fixed shapes and keyed target sampling keep a step a pure
function of (state, batch). The two models, why the res5 head, and the staged API:
`docs/detection.md` (The detector; The ensemble).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from hpcai_jax.detection.anchors import AnchorSpec, anchor_grid
from hpcai_jax.detection.boxes import area, clip, decode
from hpcai_jax.detection.nms import nms
from hpcai_jax.detection.roi_align import roi_align
from hpcai_jax.detection.roi_sampling import roi_targets, rpn_targets
from hpcai_jax.errors import UsageError
from hpcai_jax.models.resnet import BottleneckResNetBlock, ResNetBlock

HEAD_BOX_WEIGHTS = (10.0, 10.0, 5.0, 5.0)  # Detectron2's box-head delta weights


@dataclasses.dataclass(frozen=True)
class DetectorSettings:
    """Proposal, sampling and detection settings (Detectron2's defaults, fewer proposals:
    ExtremeWeather has at most 15 events per image)."""

    pre_nms_topk_train: int = 6000
    post_nms_topk_train: int = 1000
    pre_nms_topk_test: int = 3000
    post_nms_topk_test: int = 300
    rpn_nms_threshold: float = 0.7
    rpn_batch_per_image: int = 256
    rpn_positive_fraction: float = 0.5
    roi_batch_per_image: int = 512
    roi_foreground_fraction: float = 0.25
    score_threshold: float = 0.05
    detect_nms_threshold: float = 0.5
    max_detections: int = 100


@jax.named_scope("proposals")  # its FLOPs are totalled apart (flops.analytic.SCOPES)
def propose(
    objectness,
    deltas,
    anchors,
    image_hw: tuple[int, int],
    *,
    pre_nms_topk: int,
    post_nms_topk: int,
    nms_threshold: float = 0.7,
):
    """Proposals [B, R = post_nms_topk, 4] from objectness [B, A] and deltas [B, A, 4].

    Per image: the pre_nms_topk best anchors, decoded and clipped; empty boxes dropped; NMS;
    the first post_nms_topk survivors by score. Unused slots are zero boxes (area 0), which
    the head's targets and `detect` skip.
    """
    height, width = image_hw
    anchors = jnp.asarray(anchors, jnp.float32)
    k = min(pre_nms_topk, anchors.shape[0])

    def one(scores, d):
        scores, index = jax.lax.top_k(scores.astype(jnp.float32), k)
        boxes = clip(decode(d[index].astype(jnp.float32), anchors[index]), height, width)
        scores = jnp.where(area(boxes) > 0, scores, -jnp.inf)
        keep, valid = nms(boxes, scores, nms_threshold, post_nms_topk)
        return jnp.where(valid[:, None], boxes[keep], 0.0)

    return jax.vmap(one)(objectness, deltas)


def detect(
    proposals,
    class_probs,
    deltas,
    image_hw: tuple[int, int],
    *,
    score_threshold: float = 0.05,
    nms_threshold: float = 0.5,
    max_detections: int = 100,
    box_weights=HEAD_BOX_WEIGHTS,
):
    """Detections from proposals [B, R, 4], class_probs [B, R, C+1], deltas [B, R, C, 4].

    Every (proposal, class) pair is a candidate with that class's box and probability; those
    above score_threshold go through per-class NMS, best first, up to max_detections.

    Returns:
        {"boxes": [B, K, 4], "scores": [B, K], "classes": [B, K] int32}; unused slots have
        box 0, score 0 and class -1.
    """
    height, width = image_hw
    num_classes = deltas.shape[-2]

    def one(p, probs, d):
        boxes = clip(decode(d.astype(jnp.float32), p[:, None, :], box_weights), height, width)
        scores = probs[:, :num_classes].astype(jnp.float32)
        ok = (scores > score_threshold) & (area(p) > 0)[:, None] & (area(boxes) > 0)
        boxes = boxes.reshape(-1, 4)
        scores = jnp.where(ok, scores, -jnp.inf).reshape(-1)
        classes = jnp.tile(jnp.arange(num_classes, dtype=jnp.int32), p.shape[0])
        keep, valid = nms(boxes, scores, nms_threshold, max_detections, classes)
        return {
            "boxes": jnp.where(valid[:, None], boxes[keep], 0.0),
            "scores": jnp.where(valid, scores[keep], 0.0),
            "classes": jnp.where(valid, classes[keep], -1),
        }

    return jax.vmap(one)(proposals, class_probs, deltas)


def _norm(train: bool, dtype, axis_name):
    return functools.partial(
        nn.BatchNorm,
        use_running_average=not train,
        momentum=0.9,
        epsilon=1e-5,
        dtype=dtype,
        axis_name=axis_name,
    )


def _stages(x, stage_sizes, block_cls, filters, first_stride, conv, norm):
    """ResNet stages; the first block of each stage after the first strides 2 (the first stage
    strides first_stride)."""
    for i, size in enumerate(stage_sizes):
        for j in range(size):
            stride = (first_stride if i == 0 else 2) if j == 0 else 1
            x = block_cls(filters * 2**i, conv=conv, norm=norm, act=nn.relu, strides=(stride,) * 2)(
                x
            )
    return x


class Backbone(nn.Module):
    """The trunk up to the RPN's feature map: ResNet stem and stages (res2–res4 for C4)."""

    stage_sizes: Sequence[int]
    block_cls: Any
    num_filters: int
    small_stem: bool
    dtype: Any = jnp.float32
    bn_axis_name: str | None = None
    # The convolution, flax's own nn.Conv argument: the engine passes its members' form
    # (ops/member_conv.MemberConv), as flax's examples pass a `conv` module.
    conv_general_dilated: Callable = lax.conv_general_dilated

    @nn.compact
    def __call__(self, x, train: bool):
        conv = functools.partial(
            nn.Conv,
            conv_general_dilated=self.conv_general_dilated,
            use_bias=False,
            dtype=self.dtype,
        )
        norm = _norm(train, self.dtype, self.bn_axis_name)
        x = x.astype(self.dtype)
        if self.small_stem:  # stride 2
            x = conv(self.num_filters, (3, 3), (2, 2), name="conv_init")(x)
            x = nn.relu(norm(name="bn_init")(x))
        else:  # ImageNet stem, stride 4
            x = conv(self.num_filters, (7, 7), (2, 2), padding=[(3, 3), (3, 3)], name="conv_init")(
                x
            )
            x = nn.relu(norm(name="bn_init")(x))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        return _stages(x, self.stage_sizes, self.block_cls, self.num_filters, 1, conv, norm)


class RPNHead(nn.Module):
    """Detectron2's standard RPN head: 3×3 conv + ReLU, then 1×1 objectness and deltas."""

    anchors_per_location: int
    dtype: Any = jnp.float32
    conv_general_dilated: Callable = lax.conv_general_dilated  # as Backbone's

    @nn.compact
    def __call__(self, x):
        init = nn.initializers.normal(0.01)
        conv = functools.partial(
            nn.Conv,
            conv_general_dilated=self.conv_general_dilated,
            dtype=self.dtype,
            kernel_init=init,
        )
        x = nn.relu(conv(x.shape[-1], (3, 3), name="conv")(x))
        k = self.anchors_per_location
        logits = conv(k, (1, 1), name="objectness")(x)
        deltas = conv(4 * k, (1, 1), name="deltas")(x)
        b = x.shape[0]
        return (
            logits.reshape(b, -1).astype(jnp.float32),
            deltas.reshape(b, -1, 4).astype(jnp.float32),
        )


class Res5Head(nn.Module):
    """Detectron's C4 box head: res5 (three bottleneck blocks, the first strided) and mean pool."""

    num_filters: int
    dtype: Any = jnp.float32
    bn_axis_name: str | None = None
    conv_general_dilated: Callable = lax.conv_general_dilated  # as Backbone's

    @nn.compact
    def __call__(self, x, train: bool):
        conv = functools.partial(
            nn.Conv,
            conv_general_dilated=self.conv_general_dilated,
            use_bias=False,
            dtype=self.dtype,
        )
        norm = _norm(train, self.dtype, self.bn_axis_name)
        x = _stages(x, (3,), BottleneckResNetBlock, self.num_filters, 2, conv, norm)
        return jnp.mean(x, axis=(1, 2))


class FCHead(nn.Module):
    """Flatten and fully connected layers with ReLU (the 2×FC head of FPN-style detectors)."""

    dims: Sequence[int]
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool):
        del train
        x = x.reshape(x.shape[0], -1)
        for d in self.dims:
            x = nn.relu(nn.Dense(d, dtype=self.dtype)(x))
        return x


class FasterRCNN(nn.Module):
    """One member's detector. `__call__(inputs, train)`: training outputs for
    losses.detection_loss (with the targets assigned here from inputs' ground truth), or
    detections; `rpn`, `head`, `propose`, `detect`: the staged API (module docstring)."""

    num_classes: int
    image_shape: tuple[int, int, int]
    stage_sizes: Sequence[int]
    block_cls: Any
    num_filters: int
    small_stem: bool
    stride: int
    box_head: str  # "res5" or "fc"
    roi_size: int
    fc_dims: Sequence[int] = ()
    anchor_spec: AnchorSpec = AnchorSpec()
    settings: DetectorSettings = DetectorSettings()
    dtype: Any = jnp.float32
    bn_axis_name: str | None = None
    conv_general_dilated: Callable = lax.conv_general_dilated  # as Backbone's

    def setup(self):
        conv = self.conv_general_dilated
        self.backbone = Backbone(
            self.stage_sizes,
            self.block_cls,
            self.num_filters,
            self.small_stem,
            self.dtype,
            self.bn_axis_name,
            conv,
        )
        self.rpn_head = RPNHead(self.anchor_spec.per_location, self.dtype, conv)
        if self.box_head == "res5":
            filters = self.num_filters * 2 ** len(self.stage_sizes)
            self.box_features = Res5Head(filters, self.dtype, self.bn_axis_name, conv)
        else:
            self.box_features = FCHead(self.fc_dims, self.dtype)
        self.cls_score = nn.Dense(
            self.num_classes + 1, dtype=self.dtype, kernel_init=nn.initializers.normal(0.01)
        )
        self.bbox_pred = nn.Dense(
            4 * self.num_classes, dtype=self.dtype, kernel_init=nn.initializers.normal(0.001)
        )

    @nn.nowrap
    def anchors(self, image_hw: tuple[int, int] | None = None) -> np.ndarray:
        """The anchor grid [A, 4] of an image size (default: the model's image_shape)."""
        return anchor_grid(image_hw or tuple(self.image_shape[:2]), self.stride, self.anchor_spec)

    @nn.nowrap
    def propose(self, objectness, deltas, image_hw: tuple[int, int], train: bool = False):
        """Module-level `propose` with this model's anchors and settings."""
        s = self.settings
        return propose(
            objectness,
            deltas,
            self.anchors(image_hw),
            image_hw,
            pre_nms_topk=s.pre_nms_topk_train if train else s.pre_nms_topk_test,
            post_nms_topk=s.post_nms_topk_train if train else s.post_nms_topk_test,
            nms_threshold=s.rpn_nms_threshold,
        )

    @nn.nowrap
    def detect(self, proposals, class_probs, deltas, image_hw: tuple[int, int]):
        """Module-level `detect` with this model's settings."""
        s = self.settings
        return detect(
            proposals,
            class_probs,
            deltas,
            image_hw,
            score_threshold=s.score_threshold,
            nms_threshold=s.detect_nms_threshold,
            max_detections=s.max_detections,
        )

    def _stage1(self, image, train: bool):
        features = self.backbone(image, train)
        fh, fw = features.shape[1:3]
        h, w = image.shape[1:3]
        assert (fh, fw) == (-(-h // self.stride), -(-w // self.stride)), (features.shape, h, w)
        logits, deltas = self.rpn_head(features)
        return features, logits, deltas

    def _box_head(self, features, rois, train: bool):
        b, r = rois.shape[:2]
        size = (self.roi_size, self.roi_size)
        pool = functools.partial(roi_align, spatial_scale=1.0 / self.stride, output_size=size)
        pooled = jax.vmap(pool)(features, rois)  # [B, R, s, s, C]
        x = self.box_features(pooled.reshape(b * r, *pooled.shape[2:]), train)
        logits = self.cls_score(x).reshape(b, r, -1).astype(jnp.float32)
        deltas = self.bbox_pred(x).reshape(b, r, self.num_classes, 4).astype(jnp.float32)
        return logits, deltas

    def rpn(self, image):
        """Stage one in eval mode: {"features" [B, h, w, c], "objectness" [B, A] (sigmoid
        probabilities), "deltas" [B, A, 4]}."""
        features, logits, deltas = self._stage1(image, train=False)
        return {"features": features, "objectness": jax.nn.sigmoid(logits), "deltas": deltas}

    def head(self, features, proposals):
        """Stage two in eval mode on proposals [B, R, 4]: {"class_probs" [B, R, C+1] (softmax,
        background last), "deltas" [B, R, C, 4]}."""
        logits, deltas = self._box_head(features, proposals, train=False)
        return {"class_probs": jax.nn.softmax(logits, axis=-1), "deltas": deltas}

    def __call__(self, inputs, train: bool = False):
        image = inputs["image"]
        image_hw = tuple(image.shape[1:3])
        if not train:
            stage1 = self.rpn(image)
            proposals = self.propose(stage1["objectness"], stage1["deltas"], image_hw)
            stage2 = self.head(stage1["features"], proposals)
            return self.detect(proposals, stage2["class_probs"], stage2["deltas"], image_hw)

        s = self.settings
        gt_boxes = inputs["boxes"].astype(jnp.float32)
        gt_classes = inputs["classes"].astype(jnp.int32)
        # Each example's sampling key (data/climate_train.py); absent: the zero key, one fixed draw.
        keys = inputs.get("sample_key")
        if keys is None:
            keys = jnp.zeros((image.shape[0], 2), jnp.uint32)
        features, rpn_logits, rpn_deltas = self._stage1(image, train=True)
        anchors = self.anchors(image_hw)
        rpn = jax.vmap(
            functools.partial(
                rpn_targets,
                anchors,
                batch_per_image=s.rpn_batch_per_image,
                positive_fraction=s.rpn_positive_fraction,
            )
        )(gt_boxes, gt_classes, keys)
        # Proposals are constants to the head, as in Detectron2.
        proposals = self.propose(
            jax.nn.sigmoid(jax.lax.stop_gradient(rpn_logits)),
            jax.lax.stop_gradient(rpn_deltas),
            image_hw,
            train=True,
        )
        rois = jax.vmap(
            functools.partial(
                roi_targets,
                num_classes=self.num_classes,
                batch_per_image=s.roi_batch_per_image,
                foreground_fraction=s.roi_foreground_fraction,
                box_weights=HEAD_BOX_WEIGHTS,
            )
        )(proposals, gt_boxes, gt_classes, keys)
        head_logits, head_deltas = self._box_head(features, rois["rois"], train=True)
        return {
            "rpn_logits": rpn_logits,
            "rpn_deltas": rpn_deltas,
            "rpn_labels": rpn["labels"],
            "rpn_weights": rpn["sampled"].astype(jnp.float32) / s.rpn_batch_per_image,
            "rpn_box_targets": rpn["box_targets"],
            "head_logits": head_logits,
            "head_deltas": head_deltas,
            "head_labels": rois["labels"],
            "head_box_targets": rois["box_targets"],
        }


_ARCHS = {
    # ResNet-50 C4: ImageNet stem + res2–res4 (stride 16, 1024 channels), res5 box head.
    "faster_rcnn_resnet50": dict(
        stage_sizes=(3, 4, 6),
        block_cls=BottleneckResNetBlock,
        num_filters=64,
        small_stem=False,
        stride=16,
        box_head="res5",
        roi_size=14,
        settings=DetectorSettings(),
    ),
    # Three basic-block stages of 16/32/64 channels behind a stride-2 stem (stride 8).
    "faster_rcnn_small": dict(
        stage_sizes=(1, 1, 1),
        block_cls=ResNetBlock,
        num_filters=16,
        small_stem=True,
        stride=8,
        box_head="fc",
        roi_size=7,
        fc_dims=(128, 128),
        settings=DetectorSettings(
            pre_nms_topk_train=256,
            post_nms_topk_train=64,
            pre_nms_topk_test=256,
            post_nms_topk_test=32,
            rpn_batch_per_image=64,
            roi_batch_per_image=64,
            max_detections=20,
        ),
    ),
}
DETECTORS = tuple(_ARCHS)


def make_detector(
    name: str,
    num_classes: int = 4,
    dtype: Any = jnp.float32,
    bn_axis_name: str | None = None,
    image_shape: tuple[int, int, int] = (768, 1152, 16),
    conv_general_dilated: Callable = lax.conv_general_dilated,
    **overrides,
) -> FasterRCNN:
    """Builds a member detector by name; overrides replace fields (e.g. settings=...)."""
    if name not in _ARCHS:
        raise UsageError(f"--model={name}: expected a detector, one of {', '.join(DETECTORS)}")
    arch = {**_ARCHS[name], **overrides}
    return FasterRCNN(
        num_classes=num_classes,
        image_shape=tuple(image_shape),
        dtype=dtype,
        bn_axis_name=bn_axis_name,
        conv_general_dilated=conv_general_dilated,
        **arch,
    )
