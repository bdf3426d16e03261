"""The official quality targets and VFLOPS exponents (HPC AI500 V2.0 specification, reused by
V3.0; docs/score.md), and the one rule that turns a run's flags into the target it is scored
against.

A target belongs to a (workload, model, data set) triple: 0.763 top-1 is ResNet-50's on
ImageNet, not a Fashion-MNIST figure. A run on anything else must name its target; it is never
borrowed silently from another workload.
"""

from __future__ import annotations

import dataclasses

from hpcai_jax.errors import UsageError


@dataclasses.dataclass(frozen=True)
class OfficialTarget:
    quality: float
    metric: str
    epochs: int


# (workload, model, tfds/data set name) → the official target.
OFFICIAL_TARGETS: dict[tuple[str, str, str], OfficialTarget] = {
    ("image_classification", "resnet50", "imagenet2012"): OfficialTarget(
        0.763, "top1_accuracy", 90
    ),
    ("extreme_weather", "faster_rcnn_resnet50", "extremeweather"): OfficialTarget(
        0.35, "map_iou50", 50
    ),
}
# Eq. 8's n per workload: 5 for image classification, 10 for extreme-weather analytics (the
# paper's); 1 for the regression workload that proves the protocol (ours: it has no official n).
QUALITY_EXPONENTS = {"image_classification": 5.0, "extreme_weather": 10.0, "regression": 1.0}
QUALITY_METRICS = {
    "image_classification": "top1_accuracy",
    "extreme_weather": "map_iou50",
    "regression": "r2",
}


@dataclasses.dataclass(frozen=True)
class QualityTarget:
    """What a run's quality is scored against (Eq. 8: penalty = (achieved / target)^n)."""

    metric: str
    target: float
    exponent: float
    target_is_official: bool
    exponent_is_official: bool


def dataset_name(dataset: str) -> str:
    """A --dataset without its tfds version or config: "imagenet2012:5.1.0" → "imagenet2012"."""
    return dataset.split(":")[0].split("/")[0]


def official_target(workload: str, model: str, dataset: str) -> OfficialTarget | None:
    """The official target of (workload, model, data set), or None where there is none."""
    return OFFICIAL_TARGETS.get((workload, model, dataset_name(dataset)))


def resolve_target(
    workload: str, model: str, dataset: str, target_quality: float, quality_exponent: float
) -> QualityTarget:
    """target_quality None means the official target; quality_exponent None the workload's n.

    Raises UsageError when no official target exists for the run and none was given.
    """
    official = official_target(workload, model, dataset)
    if target_quality is None and official is None:
        known = (
            "; ".join(
                f"{m} on {d}: {t.quality}"
                for (w, m, d), t in OFFICIAL_TARGETS.items()
                if w == workload
            )
            or "none"
        )
        raise UsageError(
            f"--target_quality: no official target for --workload={workload} "
            f"--model={model} --dataset={dataset} (official: {known}); give "
            f"--target_quality explicitly"
        )
    target = official.quality if target_quality is None else target_quality
    n = QUALITY_EXPONENTS[workload]
    exponent = n if quality_exponent is None else quality_exponent
    return QualityTarget(
        metric=QUALITY_METRICS[workload],
        target=target,
        exponent=exponent,
        target_is_official=official is not None and target == official.quality,
        exponent_is_official=exponent == n,
    )
