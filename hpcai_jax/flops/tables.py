"""Per-operator FLOP tables and the explanation of the gap between XLA's count and the paper's
rule, from analytic counts (duck-typed: anything with .forward/.train_step FlopCounts and
.batch), so this package never imports the engine."""

from __future__ import annotations

from hpcai_jax.flops.analytic import KINDS, FlopCount

# The paper's APC for ResNet-50 at |B| = 512 (docs/design.md §1): 23.0 GFLOP per image, He et al.'s
# ≈ 3.8 GMAC forward × 2 × 3 (3.8 exactly would give 11,674).
PAPER_RESNET50_APC_GFLOPS = 11_776
PAPER_RESNET50_BATCH = 512


def _g(flops: float) -> str:
    return f"{flops / 1e9:10.4f}"


def _share(part: float, total: float) -> str:
    return f"{100 * part / total:6.2f}%" if total else "     - "


def forward_table(count: FlopCount) -> str:
    """Per-operator table of a forward pass, GFLOP per example, under the three conventions."""
    b = count.batch
    t3, t3m, xla = (count.total(c) for c in ("table3", "table3_2mac", "xla"))
    lines = [
        f"{'operator':<22} {'ops':>5} {'Table 3':>10} {'share':>7} {'2·MAC':>10} "
        f"{'XLA rules':>10} {'share':>7}"
    ]
    for kind in KINDS:
        row = count.row(kind)
        if not (row.ops or row.xla):
            continue
        lines.append(
            f"{kind:<22} {row.ops:>5} {_g(row.table3 / b)} {_share(row.table3, t3)} "
            f"{_g(row.table3_2mac / b)} {_g(row.xla / b)} {_share(row.xla, xla)}"
        )
    lines.append(
        f"{'total [GFLOP/example]':<22} {'':>5} {_g(t3 / b)} {'':>7} {_g(t3m / b)} {_g(xla / b)}"
    )
    return "\n".join(lines)


def train_table(model_flops) -> str:
    """Per-operator table of one member's training step, GFLOP per example: the paper's
    3 × forward (Table 3), Table 3 applied to every operator of the step, XLA's rules."""
    step, fwd3 = model_flops.train_step, model_flops.train_step_3x_forward
    b = step.batch
    p, t3, xla = fwd3.total("table3"), step.total("table3"), step.total("xla")
    lines = [
        f"{'operator':<22} {'ops':>5} {'3×fwd T3':>10} {'share':>7} {'step T3':>10} "
        f"{'XLA rules':>10} {'share':>7}"
    ]
    for kind in KINDS:
        row, row3 = step.row(kind), fwd3.row(kind)
        if not (row.ops or row.xla or row3.table3):
            continue
        lines.append(
            f"{kind:<22} {row.ops:>5} {_g(row3.table3 / b)} {_share(row3.table3, p)} "
            f"{_g(row.table3 / b)} {_g(row.xla / b)} {_share(row.xla, xla)}"
        )
    lines.append(
        f"{'total [GFLOP/example]':<22} {'':>5} {_g(p / b)} {'':>7} {_g(t3 / b)} {_g(xla / b)}"
    )
    return "\n".join(lines)


def explain_gap(model_flops) -> list[str]:
    """Per operator kind, why one member's step under XLA's rules differs from 3 × forward
    under Table 3 (the paper's rule), in GFLOP per example."""
    fwd, step, b = model_flops.forward, model_flops.train_step, model_flops.batch
    out = []
    for kind in KINDS:
        f, s = fwd.row(kind), step.row(kind)
        paper, counted = 3 * f.table3 / b / 1e9, s.xla / b / 1e9
        if not (paper or counted):
            continue
        delta = counted - paper
        if kind in ("convolution", "depthwise_convolution", "group_convolution"):
            padding = 3 * (f.table3 - f.xla) / b / 1e9
            why = (
                f"taps on padding, which XLA skips, {-padding:+.4f}; backward against "
                f"2 × forward on the same taps {delta + padding:+.4f} (the first layer's input "
                "gradient is never computed)"
            )
        elif kind == "fully_connected":
            why = "Table 3 counts FL_in × FL_out (no factor 2), XLA 2 per multiply-add"
        elif kind == "normalization":
            why = "Table 3: 1 per element; XLA counts every op of mean, variance, scale, shift"
        elif kind == "pooling":
            why = "Table 3: 1 per output; XLA: window − 1 per output (and its gradient)"
        elif kind == "elementwise":
            why = "backward of ReLU/add, loss, input normalisation, optimizer update"
        else:
            why = "ignored by Table 3 (low share)"
        out.append(
            f"{kind}: 3×fwd Table 3 {paper:.4f}, step XLA rules {counted:.4f} ({delta:+.4f}): {why}"
        )
    return out
