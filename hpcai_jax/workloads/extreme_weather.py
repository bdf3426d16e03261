"""Extreme-weather analytics (HPC AI500's second workload): a Faster R-CNN detector of tropical
depressions, tropical cyclones, extratropical cyclones and atmospheric rivers in 16-channel
climate fields, scored by COCO's mAP@IoU 0.5.

The ensemble averages its members' outputs on shared proposals (He et al. 2016, the ensemble of
their COCO entry): the voting members' RPN objectness and box deltas are averaged over the
common anchor grid and turned into one set of proposals; every member's box head scores those
proposals; their class probabilities and box deltas are averaged and decoded into the
ensemble's detections (docs/detection.md says why not weighted box fusion). Evaluation stays
additive: detections are matched to the ground truth on the device and histogrammed by score
(detection/average_precision.py), so the host only turns summed counts into AP.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

from hpcai_jax.data.climate import CLASSES, ClimateSpec
from hpcai_jax.detection import average_precision as ap
from hpcai_jax.detection.losses import detection_loss
from hpcai_jax.models import faster_rcnn, int8
from hpcai_jax.workloads.base import Workload

# Score bins of the AP histograms: 4 × finer than average_precision's default, since a
# detector's scores crowd into few logit bins and binning can only lower AP (the record's
# binning bound); 4 classes × 10 IoU thresholds × 2 × 4096 floats per count vector.
SCORE_BINS = 4096


@dataclasses.dataclass(frozen=True)
class ExtremeWeatherWorkload(Workload):
    spec: ClimateSpec
    model_name: str
    dtype: str = "float32"
    name: str = "extreme_weather"
    metric: str = "map_iou50"

    def model(self, axis_name: str | None, conv: Callable = lax.conv_general_dilated) -> nn.Module:
        model = faster_rcnn.make_detector(
            self.model_name,
            num_classes=self.spec.num_classes,
            dtype=int8.compute_dtype(self.dtype),
            bn_axis_name=axis_name,
            image_shape=self.spec.image_shape,
            conv_general_dilated=conv,
        )
        return int8.apply_policy(model, self.dtype)

    def inputs(self, batch):
        """Per-channel normalisation with the training split's statistics, on the device; the
        ground truth rides along (the detector assigns its training targets from it)."""
        mean = jnp.asarray(self.spec.mean, jnp.float32)
        std = jnp.asarray(self.spec.std, jnp.float32)
        image = (batch["image"].astype(jnp.float32) - mean) / std
        return {
            "image": image,
            "boxes": batch["boxes"],
            "classes": batch["classes"],
            "sample_key": batch["sample_key"],  # the targets' sampling key, per example
        }

    def loss(self, outputs, batch):
        del batch  # the targets were assigned inside the model
        return detection_loss(outputs)

    def predict(self, outputs):
        return outputs  # the detections dict: boxes, scores, classes

    def eval_predictions(self, x, apply_members, average):
        """Each member's own detections, and the ensemble's on shared proposals."""
        model = self.model(None)
        image_hw = self.spec.image_shape[:2]

        def own(apply):
            stage1 = apply(x["image"], method=faster_rcnn.FasterRCNN.rpn)
            proposals = model.propose(stage1["objectness"], stage1["deltas"], image_hw)
            head = apply(stage1["features"], proposals, method=faster_rcnn.FasterRCNN.head)
            detections = model.detect(proposals, head["class_probs"], head["deltas"], image_hw)
            return stage1, detections

        stage1, members = apply_members(own)
        shared = model.propose(average(stage1["objectness"]), average(stage1["deltas"]), image_hw)
        heads = apply_members(
            lambda apply, features: apply(features, shared, method=faster_rcnn.FasterRCNN.head),
            stage1["features"],
        )
        mean = average(heads)
        ensemble = model.detect(shared, mean["class_probs"], mean["deltas"], image_hw)
        return members, ensemble

    def counts(self, prediction, batch, weight):
        return ap.match_counts(
            prediction["boxes"],
            prediction["scores"],
            prediction["classes"],
            batch["boxes"],
            batch["classes"],
            weight,
            self.spec.num_classes,
            SCORE_BINS,
        )

    def quality(self, counts) -> float | None:
        return ap.average_precision(counts, self.spec.num_classes, SCORE_BINS).map50

    def quality_details(self, counts) -> dict:
        q = ap.average_precision(counts, self.spec.num_classes, SCORE_BINS)
        return {
            "map_iou50": q.map50,
            "map_iou50_95": q.map50_95,
            # Score binning can only lower AP; the exact figure is at most this much higher.
            "map_iou50_binning_bound": q.map50_bound,
            "map_iou50_95_binning_bound": q.map50_95_bound,
            "ap_iou50_per_class": dict(zip(CLASSES, q.ap50_per_class, strict=True)),
            "ground_truth_per_class": dict(zip(CLASSES, q.gt_per_class, strict=True)),
            "detections": q.detections,
        }

    def synthetic(self, key, lead):
        """Random fields with one random box per image (throughput runs: the quality is not
        scored, only the work per step must be a detector's)."""
        h, w, c = self.spec.image_shape
        k1, k2, k3, k4 = jax.random.split(key, 4)
        image = jax.random.normal(k1, (*lead, h, w, c)) * jnp.asarray(self.spec.std) + jnp.asarray(
            self.spec.mean
        )
        corner = jax.random.uniform(k2, (*lead, 1, 2)) * jnp.asarray([h / 2, w / 2])
        size = jnp.asarray([h / 8, w / 8])
        box = jnp.concatenate([corner, corner + size], axis=-1)
        pad = jnp.full((*lead, self.spec.max_boxes - 1, 4), -1.0)
        classes = jnp.concatenate(
            [
                jax.random.randint(k3, (*lead, 1), 0, self.spec.num_classes),
                jnp.full((*lead, self.spec.max_boxes - 1), -1),
            ],
            axis=-1,
        )
        return {
            "image": image.astype(jnp.float16),
            "boxes": jnp.concatenate([box, pad], axis=-2).astype(jnp.float32),
            "classes": classes.astype(jnp.int32),
            "sample_key": jax.random.bits(k4, (*lead, 2), jnp.uint32),
        }
