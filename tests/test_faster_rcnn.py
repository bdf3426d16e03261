"""The Faster R-CNN detector: shapes, training on one image, eval outputs, the staged API."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from hpcai_jax.detection.losses import detection_loss
from hpcai_jax.errors import UsageError
from hpcai_jax.models import faster_rcnn
from hpcai_jax.models.faster_rcnn import FasterRCNN, make_detector

pytestmark = pytest.mark.slow  # every test compiles the detector or shares one that did

H, W = 32, 48
BOX = [8.0, 12.0, 24.0, 36.0]


@pytest.fixture(scope="module")
def model():
    return make_detector("faster_rcnn_small", image_shape=(H, W, 16))


@pytest.fixture(scope="module")
def inputs():
    """One 32 × 48 image with one ETC box over a raised patch; 14 padding rows."""
    rng = np.random.default_rng(0)
    image = rng.normal(size=(1, H, W, 16)).astype(np.float32)
    image[0, 8:24, 12:36, :4] += 2.0
    boxes = np.full((1, 15, 4), -1.0, np.float32)
    boxes[0, 0] = BOX
    classes = np.full((1, 15), -1, np.int32)
    classes[0, 0] = 2
    return {
        "image": jnp.asarray(image),
        "boxes": jnp.asarray(boxes),
        "classes": jnp.asarray(classes),
    }


@pytest.fixture(scope="module")
def trained(model, inputs):
    """Initial variables, 40 steps of SGD with momentum on the one image (sampling keyed by the
    step, as in training), and the losses."""
    variables = jax.jit(lambda: model.init(jax.random.key(0), inputs, train=False))()
    tx = optax.sgd(0.02, momentum=0.9)

    @jax.jit
    def step(params, batch_stats, opt_state, key):
        def loss_fn(p):
            outputs, state = model.apply(
                {"params": p, "batch_stats": batch_stats},
                {**inputs, "sample_key": key},  # a fresh draw of anchors and RoIs each step
                train=True,
                mutable=["batch_stats"],
            )
            loss, metrics = detection_loss(outputs)
            return loss, (metrics, state["batch_stats"], outputs)

        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, aux

    params, batch_stats = variables["params"], variables["batch_stats"]
    opt_state = tx.init(params)
    history = []
    for i in range(40):
        params, opt_state, loss, (metrics, batch_stats, outputs) = step(
            params, batch_stats, opt_state, jnp.asarray([[i, 0]], jnp.uint32)
        )
        history.append((float(loss), {k: float(v) for k, v in metrics.items()}))
        if i == 0:
            first_outputs = outputs
    return {
        "initial": variables,
        "final": {"params": params, "batch_stats": batch_stats},
        "history": history,
        "first_outputs": first_outputs,
    }


def test_training_outputs_shapes(model, trained):
    out = trained["first_outputs"]
    anchors = (H // 8) * (W // 8) * 20
    expected = {
        "rpn_logits": (1, anchors),
        "rpn_deltas": (1, anchors, 4),
        "rpn_labels": (1, anchors),
        "rpn_weights": (1, anchors),
        "rpn_box_targets": (1, anchors, 4),
        "head_logits": (1, 64, 5),
        "head_deltas": (1, 64, 4, 4),
        "head_labels": (1, 64),
        "head_box_targets": (1, 64, 4),
    }
    assert {k: v.shape for k, v in out.items()} == expected
    assert model.anchors().shape == (anchors, 4)
    # The GT box is among the sampled RoIs: foreground of class 2 with zero box targets.
    labels = np.asarray(out["head_labels"][0])
    assert labels[0] == 2 and (labels[(labels >= 0) & (labels < 4)] == 2).all()
    # At most 64 × 0.5 anchors positive, weights 1/64 on the sampled ones.
    w = np.asarray(out["rpn_weights"][0])
    assert set(np.unique(w)) <= {0.0, 1 / 64} and 0 < (w > 0).sum() <= 64
    assert np.asarray(out["rpn_labels"]).sum() <= 32


def test_small_model_overfits_one_image(trained):
    history = trained["history"]
    losses = [loss for loss, _ in history]
    assert all(np.isfinite(losses))
    first, last = history[0][1], history[-1][1]
    assert losses[-1] < 0.5 * losses[0]
    assert last["head_cls"] < 0.5 * first["head_cls"]
    assert last["rpn_cls"] < 0.9 * first["rpn_cls"]
    assert last["rpn_box"] < 0.5 * first["rpn_box"]


@pytest.fixture(scope="module")
def detections(model, inputs, trained):
    return jax.jit(lambda v, x: model.apply(v, x, train=False))(trained["final"], inputs)


def test_eval_outputs_are_well_formed(detections):
    boxes = np.asarray(detections["boxes"])
    scores = np.asarray(detections["scores"])
    classes = np.asarray(detections["classes"])
    assert boxes.shape == (1, 20, 4) and scores.shape == (1, 20) and classes.shape == (1, 20)
    assert classes.dtype == np.int32
    valid = classes >= 0
    assert valid.any() and (classes < 4).all()
    assert (scores[~valid] == 0).all() and (boxes[~valid] == 0).all()
    assert ((scores[valid] > 0.05) & (scores[valid] <= 1)).all()
    assert (np.diff(scores[valid]) <= 0).all()  # best first
    assert (boxes[..., 0] >= 0).all() and (boxes[..., 2] <= H).all() and (boxes[..., 3] <= W).all()
    # After training on it the best detection is the box, of class 2.
    assert classes[0, 0] == 2
    best = boxes[0, 0]
    inter = max(0, min(best[2], BOX[2]) - max(best[0], BOX[0])) * max(
        0, min(best[3], BOX[3]) - max(best[1], BOX[1])
    )
    union = (best[2] - best[0]) * (best[3] - best[1]) + 16 * 24 - inter
    assert inter / union > 0.5


def test_staged_api_gives_the_same_detections(model, inputs, trained, detections):
    variables = trained["final"]
    hw = (H, W)

    @jax.jit
    def staged(v, image):
        stage1 = model.apply(v, image, method=FasterRCNN.rpn)
        p = model.propose(stage1["objectness"], stage1["deltas"], hw)
        stage2 = model.apply(v, stage1["features"], p, method=FasterRCNN.head)
        return stage1, model.detect(p, **stage2, image_hw=hw)

    stage1, got = staged(variables, inputs["image"])
    assert stage1["objectness"].shape == (1, (H // 8) * (W // 8) * 20)
    assert ((stage1["objectness"] > 0) & (stage1["objectness"] < 1)).all()
    np.testing.assert_array_equal(got["classes"], detections["classes"])
    np.testing.assert_allclose(got["scores"], detections["scores"], rtol=1e-6)
    np.testing.assert_allclose(got["boxes"], detections["boxes"], rtol=1e-6, atol=1e-5)

    # The module-level functions with the model's settings are the same as its methods.
    s = model.settings
    p = faster_rcnn.propose(
        stage1["objectness"],
        stage1["deltas"],
        model.anchors(hw),
        hw,
        pre_nms_topk=s.pre_nms_topk_test,
        post_nms_topk=s.post_nms_topk_test,
    )
    np.testing.assert_array_equal(p, model.propose(stage1["objectness"], stage1["deltas"], hw))
    assert p.shape == (1, 32, 4)


def test_members_under_vmap(model, inputs, trained, detections):
    """Two members stacked on a leading axis: each gives its own detections, and averaging two
    identical members' stage outputs gives exactly that member's detections."""
    members = jax.tree.map(lambda a, b: jnp.stack([a, b]), trained["final"], trained["initial"])
    out = jax.jit(jax.vmap(lambda v: model.apply(v, inputs, train=False)))(members)
    np.testing.assert_array_equal(out["classes"][0], detections["classes"])
    np.testing.assert_allclose(out["scores"][0], detections["scores"], rtol=1e-5)

    twins = jax.tree.map(lambda a: jnp.stack([a, a]), trained["final"])
    hw = (H, W)

    @jax.jit
    def ensemble(members, image):
        stage1 = jax.vmap(lambda v: model.apply(v, image, method=FasterRCNN.rpn))(members)
        mean = functools.partial(jnp.mean, axis=0)
        p = model.propose(mean(stage1["objectness"]), mean(stage1["deltas"]), hw)
        heads = jax.vmap(lambda v, f: model.apply(v, f, p, method=FasterRCNN.head))(
            members, stage1["features"]
        )
        return model.detect(p, mean(heads["class_probs"]), mean(heads["deltas"]), hw)

    got = ensemble(twins, inputs["image"])
    np.testing.assert_array_equal(got["classes"], detections["classes"])
    np.testing.assert_allclose(got["scores"], detections["scores"], rtol=1e-6)


def test_resnet50_shapes_and_parameters():
    """ResNet-50 C4 traced only (eval_shape): stride 16, 1024-channel features, res5 head."""
    model = make_detector("faster_rcnn_resnet50", image_shape=(64, 96, 16))
    x = {
        "image": jax.ShapeDtypeStruct((2, 64, 96, 16), jnp.float32),
        "boxes": jax.ShapeDtypeStruct((2, 15, 4), jnp.float32),
        "classes": jax.ShapeDtypeStruct((2, 15), jnp.int32),
    }
    variables = jax.eval_shape(lambda x: model.init(jax.random.key(0), x, train=False), x)
    params = sum(np.prod(p.shape) for p in jax.tree.leaves(variables["params"]))
    # ResNet-50 to res5 (23.5 M with a 16-channel stem) + RPN conv 9.4 M + predictors.
    assert 32e6 < params < 34e6
    det = jax.eval_shape(lambda v, x: model.apply(v, x, train=False), variables, x)
    assert det["boxes"].shape == (2, 100, 4) and det["classes"].dtype == jnp.int32
    stage1 = jax.eval_shape(
        lambda v, i: model.apply(v, i, method=FasterRCNN.rpn), variables, x["image"]
    )
    assert stage1["features"].shape == (2, 4, 6, 1024)
    assert stage1["objectness"].shape == (2, 4 * 6 * 20)
    out, _ = jax.eval_shape(
        lambda v, x: model.apply(v, x, train=True, mutable=["batch_stats"]), variables, x
    )
    assert out["head_logits"].shape == (2, 512, 5) and out["head_deltas"].shape == (2, 512, 4, 4)


def test_unknown_detector_is_a_usage_error():
    with pytest.raises(UsageError, match="--model=faster_rcnn_tiny"):
        make_detector("faster_rcnn_tiny")
