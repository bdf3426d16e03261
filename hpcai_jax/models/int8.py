"""--dtype=int8: quantized training with qwix (the successor of aqt), the one place it is wired.

Every convolution and dense layer of a member runs int8 × int8 → int32 in the forward pass and
in both backward products (the input gradient and the weight gradient), with dynamic per-channel
absmax scales computed on the fly; the parameters (master weights) stay float32, and BatchNorm,
activations between layers, the loss and the optimizer stay float32. qwix intercepts
`jax.lax.conv_general_dilated` and `jax.lax.dot_general` (what `nn.Conv` and `nn.Dense` call)
while the member's `__call__` runs, so the model definitions need no change; other products
(RoIAlign's einsums) are not named by the rule and stay float32. Loss scaling does not apply:
the gradients are quantized with their own absmax scales, so they neither overflow nor flush.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from hpcai_jax import dtypes

INT8 = "int8"
# The qwix op names the rule matches: the layers with weights, nothing else.
QUANTIZED_OPS = ("conv_general_dilated", "dot_general")


def compute_dtype(name: str) -> np.dtype:
    """The dtype a member model is built in: float32 under int8, whose matmuls qwix quantizes."""
    return dtypes.dtype("float32" if name == INT8 else name)


def apply_policy(model: nn.Module, name: str) -> nn.Module:
    """`model` as --dtype=`name` trains it: quantized by qwix under int8, unchanged otherwise."""
    return _quantized(model) if name == INT8 else model


def _quantized(model: nn.Module) -> nn.Module:
    """`model` with its weighted layers' matmuls in int8 (qwix)."""
    import qwix  # only --dtype=int8 needs it (and costs ~1 s to import)

    class LayerQtProvider(qwix.QtProvider):
        """qwix's QtProvider, told that a dot's left operand is never a weight (nn.Dense passes
        its kernel on the right). qwix 0.1.8 finds weights by identity, then by tracing, then by
        shape; under the members' vmap only the shape test is left, and a Dense whose input has
        its kernel's shape (the FC head of faster_rcnn_small) makes both operands "weights" and
        trips its assert ('lhs and rhs cannot be both weights', providers/qt.py:336). The rule
        gives weights and activations the same int8 absmax treatment, so the label changes
        nothing else."""

        def _create_dot_general_qt_config(self, rule, op_id, lhs, rhs):
            # qwix reads lhs only to ask whether it is a parameter; no parameter is a scalar.
            return super()._create_dot_general_qt_config(
                rule, op_id, jax.ShapeDtypeStruct((), lhs.dtype), rhs
            )

    rule = qwix.QtRule(
        op_names=QUANTIZED_OPS, weight_qtype=jnp.int8, act_qtype=jnp.int8, bwd_qtype=jnp.int8
    )
    return qwix.quantize_model(model, LayerQtProvider([rule]))
