"""pycocotools on padded numpy arrays: the reference `average_precision` is tested against.

An extra dependency (`pip install pycocotools`), imported only when called, so that the engine
runs without it. Host only: it needs every prediction in one place.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np


def _xywh(boxes):
    """ymin, xmin, ymax, xmax → COCO's x, y, width, height (float64, so x + w is xmax again)."""
    b = np.asarray(boxes, np.float64)
    return np.stack([b[..., 1], b[..., 0], b[..., 3] - b[..., 1], b[..., 2] - b[..., 0]], -1)


def coco_map(detections, ground_truth, num_classes: int) -> tuple[float | None, float | None]:
    """(mAP@0.5, mAP@[.5:.95]): pycocotools' stats[1] and stats[0] for N images.

    Args:
        detections: (boxes [N, K, 4] ymin, xmin, ymax, xmax; scores [N, K]; classes [N, K]
            int, -1 for an empty slot).
        ground_truth: (boxes [N, G, 4]; classes [N, G] int, -1 for padding).
        num_classes: classes 0 .. num_classes - 1.

    Returns:
        None for a figure COCO reports as -1 (no class has a ground-truth box).
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    det_boxes, det_scores, det_classes = (np.asarray(a) for a in detections)
    gt_boxes, gt_classes = (np.asarray(a) for a in ground_truth)
    images, annotations, results = [], [], []
    for i in range(len(gt_classes)):
        images.append({"id": i + 1})
        for box, c in zip(_xywh(gt_boxes[i]), gt_classes[i], strict=True):
            if 0 <= c < num_classes:
                annotations.append(
                    {
                        # ids from 1: evaluateImg stores a match as the GT's id, 0 meaning none.
                        "id": len(annotations) + 1,
                        "image_id": i + 1,
                        "category_id": int(c) + 1,
                        "bbox": box.tolist(),
                        "area": float(box[2] * box[3]),
                        "iscrowd": 0,
                    }
                )
        for box, s, c in zip(_xywh(det_boxes[i]), det_scores[i], det_classes[i], strict=True):
            if 0 <= c < num_classes:
                results.append(
                    {
                        "image_id": i + 1,
                        "category_id": int(c) + 1,
                        "bbox": box.tolist(),
                        "score": float(s),
                    }
                )
    if not annotations:
        return None, None
    if not results:  # loadRes cannot take an empty list; COCO's AP of nothing found is 0
        return 0.0, 0.0
    categories = [{"id": c + 1, "name": str(c)} for c in range(num_classes)]
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": images, "annotations": annotations, "categories": categories}
        gt.createIndex()
        evaluation = COCOeval(gt, gt.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    map50_95, map50 = evaluation.stats[:2]
    return float(map50), float(map50_95)
