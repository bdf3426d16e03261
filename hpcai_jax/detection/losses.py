"""The Faster R-CNN training loss, from the outputs and targets the model assigns in training.

Normalisations follow Detectron2: the RPN's two terms are sums over the sampled anchors divided
by (anchors sampled per image × images), a fixed figure carried in `rpn_weights`; the head's
classification and box terms are sums over the sampled (resp. foreground) RoIs divided by the
RoI slots (RoIs sampled per image × images), also a fixed figure. Box terms are L1
(Detectron2's smooth-L1 with beta 0).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def detection_loss(outputs):
    """(scalar loss, metrics) from FasterRCNN's training outputs.

    Args:
        outputs: dict with rpn_logits [B, A], rpn_deltas [B, A, 4], rpn_labels [B, A] (1/0),
            rpn_weights [B, A] (1 / anchors sampled per image where sampled, else 0),
            rpn_box_targets [B, A, 4], head_logits [B, S, C+1], head_deltas [B, S, C, 4],
            head_labels [B, S] (class, C for background, -1 unused), head_box_targets [B, S, 4].

    Returns:
        the sum of rpn_cls, rpn_box, head_cls and head_box, and a dict of those four, plus
        fg_fraction (foreground share of the sampled RoIs) and head_accuracy.
    """
    f32 = lambda name: outputs[name].astype(jnp.float32)  # noqa: E731
    images = outputs["rpn_logits"].shape[0]
    weights = f32("rpn_weights")
    labels = f32("rpn_labels")
    bce = optax.sigmoid_binary_cross_entropy(f32("rpn_logits"), labels)
    rpn_cls = jnp.sum(weights * bce) / images
    rpn_l1 = jnp.sum(jnp.abs(f32("rpn_deltas") - f32("rpn_box_targets")), axis=-1)
    rpn_box = jnp.sum(weights * labels * rpn_l1) / images

    logits = f32("head_logits")
    num_classes = logits.shape[-1] - 1
    head_labels = outputs["head_labels"]
    sampled = head_labels >= 0
    foreground = sampled & (head_labels < num_classes)
    # The RoI slots per image × images, a fixed figure like the RPN's: a member's loss averaged
    # over its data-parallel devices is then exactly its loss on the whole batch (a count of the
    # sampled RoIs would differ per device when an image has fewer candidates than slots).
    count = jnp.float32(head_labels.size)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(head_labels, 0))
    head_cls = jnp.sum(jnp.where(sampled, ce, 0.0)) / count
    # Class-specific deltas: the ground-truth class's row, picked by a one-hot product.
    own = jax.nn.one_hot(head_labels, num_classes, dtype=jnp.float32)  # background → all 0
    deltas = jnp.einsum("bscd,bsc->bsd", f32("head_deltas"), own)
    head_l1 = jnp.sum(jnp.abs(deltas - f32("head_box_targets")), axis=-1)
    head_box = jnp.sum(jnp.where(foreground, head_l1, 0.0)) / count
    correct = sampled & (jnp.argmax(logits, axis=-1) == head_labels)
    metrics = {
        "rpn_cls": rpn_cls,
        "rpn_box": rpn_box,
        "head_cls": head_cls,
        "head_box": head_box,
        "fg_fraction": jnp.sum(foreground) / jnp.maximum(jnp.sum(sampled), 1),
        "head_accuracy": jnp.sum(correct) / jnp.maximum(jnp.sum(sampled), 1),
    }
    return rpn_cls + rpn_box + head_cls + head_box, metrics
