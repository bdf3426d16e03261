"""Two-stage detection with static shapes: boxes, anchors, NMS, RoIAlign, targets, losses."""
