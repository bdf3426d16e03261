"""The acceptance's members group: how a device runs many small members (docs/members.md, "On
a device"). First the layer table (acceptance/member_layers.py: four resnet_small layers at each
(M, B) of the sizes' grid, every formulation and the ideal, written to members_layers.json and
.md in OUT_DIR), then the whole step of the sizes' member model (resnet_small; resnet_tiny at
--smoke) at M members of batch B under every --member_map form, unroll, M separate steps and the
ideal, then the decision rule's verdict on what `--member_map=auto` should take on this backend
(what a training run given this acceptance.json takes: --acceptance, records/strategy.py)."""

from __future__ import annotations

import dataclasses
import json
import time

from hpcai_jax.acceptance import member_layers
from hpcai_jax.acceptance.items import PASS, WARN, Item, from_row
from hpcai_jax.member_forms import ONE_KERNEL_PER_LAYER, VMAP_FORMS, XLA_BATCHED
from hpcai_jax.nodecheck import training
from hpcai_jax.nodecheck.budget import Allotment
from hpcai_jax.nodecheck.rows import NA, skipped
from hpcai_jax.records.strategy import DECISION_ITEM, NOT_MEASURED, UNCHANGED

GROUP = "members"
LAYER_FILE = "members_layers"


def layer_items(ctx, allotment: Allotment, share: float) -> list[Item]:
    """The layer table within `share` of the group's seconds: one item per (M, B) and
    one-kernel-per-layer form, its speed over sequential; the table beside acceptance.json."""
    deadline = time.perf_counter() + share
    rows, items = [], []
    for m, b in ctx.sizes.member_layer_grid:
        name = f"layers, M={m} B={b}"
        layers = [member_layers.LAYERS[i] for i in ctx.sizes.member_layers]
        done = 0
        for layer in layers:
            if time.perf_counter() > deadline:
                break
            rows += _layer_rows(ctx, layer, m, b, items, name)
            done += 1
        if done < len(layers):
            why = f"the layer table's time is spent ({done} of {len(layers)} layers measured)"
            items.append(from_row(GROUP, skipped(name, why)))
            continue
        total = member_layers.summary(rows, m, b)
        for form in (*ONE_KERNEL_PER_LAYER, XLA_BATCHED, "ideal"):
            if form in total and "sequential" in total:
                items.append(
                    Item(
                        GROUP,
                        f"{name}: {form} over sequential",
                        total["sequential"] / total[form],
                        "x",
                        "",
                        NA,
                        "all the layers' forward, input and weight gradients",
                    )
                )
    _write_layers(ctx, rows)
    return items


def _layer_rows(ctx, layer, m: int, b: int, items: list, name: str) -> list[dict]:
    """Every form of one layer at (M, B); a form that fails (out of memory) is a WARN item."""
    rows = []
    for form in member_layers.FORMS:
        try:
            rows.append(member_layers.measure(layer, m, b, form, calls=ctx.sizes.member_calls))
        except Exception as e:  # noqa: BLE001 - out of memory: a finding
            why = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
            items.append(Item(GROUP, f"{name}, {layer.name}, {form}", None, "", "", WARN, why))
    return rows


def _write_layers(ctx, rows: list[dict]) -> None:
    if ctx.out_dir is None or not rows:
        return
    (ctx.out_dir / f"{LAYER_FILE}.json").write_text(json.dumps(rows, indent=1) + "\n")
    (ctx.out_dir / f"{LAYER_FILE}.md").write_text(member_layers.table(rows) + "\n")


def _step_config(ctx, members: int, batch: int, strategy: str, how: str):
    base = ctx.base
    config = dataclasses.replace(
        base,
        data=dataclasses.replace(base.data, image_size=28, num_classes=10),
        model=dataclasses.replace(base.model, model=ctx.sizes.member_model),
    )
    return training.step_config(
        config,
        members_per_device=members,
        batch_size=batch,
        strategy=strategy,
        member_map=how,
        devices=1,
    )


def step_variants(
    m: int, b: int, forms: tuple[str, ...] | None = None
) -> dict[str, tuple[int, int, str, str, int]]:
    """name → (members, batch, strategy, member map, images per step per member): every
    --member_map form (or `forms`) and unroll, separate steps and the ideal."""
    out = {f"vmap {how}": (m, b, "vmap", how, b) for how in forms or VMAP_FORMS}
    if forms is None:
        out["unroll"] = (m, b, "unroll", "auto", b)
    out["separate"] = (1, b, "unroll", "auto", b)  # M of these make one ensemble step
    out["ideal"] = (1, m * b, "unroll", "auto", b * m)
    return out


def step_items(ctx, allotment: Allotment) -> tuple[list[Item], dict[str, float]]:
    """The whole step per variant: images/s per member against the separate steps' rate."""
    m, b = ctx.sizes.member_step
    variants = step_variants(m, b, ctx.sizes.member_forms)
    rates, items = {}, []
    for i, (name, (members, batch, strategy, how, images)) in enumerate(variants.items()):
        label = f"step, {m} members of batch {b}, {name}"
        share = allotment.agreed_left_s() / (len(variants) - i)
        deadline = time.perf_counter() + share
        try:
            run = training.run_steps(
                _step_config(ctx, members, batch, strategy, how),
                lambda d=deadline: d - time.perf_counter(),
                min(5, ctx.sizes.max_steps),
                1,
            )
        except Exception as e:  # noqa: BLE001 - an out-of-memory variant is a finding
            items.append(Item(GROUP, label, None, "img/s", "", WARN, str(e).splitlines()[0]))
            continue
        per_member = images / m if name == "ideal" else images
        rates[name] = per_member / run.median_s if run.median_s else 0.0
        verdict = PASS if run.finite and rates[name] else WARN
        note = f"{len(run.step_s)} timed steps; build {run.build_s:.0f} s; per member"
        items.append(Item(GROUP, label, rates[name], "img/s", "", verdict, note))
    separate = rates.get("separate")
    return [
        dataclasses.replace(
            it,
            reference="M separate 1-member steps" if separate else "",
            reference_value=separate,
        )
        for it in items
    ], rates


def decision_item(rates: dict[str, float], backend: str) -> Item:
    """The decision rule (member_layers.DECISION) applied to the whole step's rates."""
    seq, ideal = rates.get("vmap scan"), rates.get("ideal")
    best = max(((rates.get(f"vmap {f}", 0.0), f) for f in ONE_KERNEL_PER_LAYER), default=None)
    if not (seq and ideal and best and best[0]):
        return Item(GROUP, DECISION_ITEM, NOT_MEASURED, "", "", NA, "not measured")
    meets = best[0] >= 2 * seq and best[0] >= 0.5 * ideal
    verdict = best[1] if meets else UNCHANGED
    note = (
        f"{best[1]}: {best[0] / seq:.2f}x sequential, {best[0] / ideal:.0%} of the ideal on "
        f"{backend}; rule: {member_layers.DECISION}"
    )
    return Item(GROUP, DECISION_ITEM, verdict, "", "", NA, note)


def member_items(ctx, allotment: Allotment) -> list[Item]:
    """The layer table (a third of the group's time at most), the whole step, the decision."""
    items = layer_items(ctx, allotment, allotment.left_s() / 3)
    steps, rates = step_items(ctx, allotment)
    return [*items, *steps, decision_item(rates, ctx.backend)]
