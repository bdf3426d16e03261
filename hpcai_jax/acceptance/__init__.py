"""One accelerator judged in one command, within a time budget: the environment, STREAM, matmul
peaks, the node check's items, the ResNet-50 step, resnet_small's members layer by layer and
whole under every --member_map form (members.py), the dtypes, the full-size detector, the JPEG
input path and the GPU settings, each item a figure against its reference with PASS, WARN or
FAIL (docs/acceptance.md).

`bash benchmarks/accelerator/acceptance.sh OUT_DIR` is the entry point; this package is what it
runs (`python -m hpcai_jax.acceptance`), and `render` writes the summary even after a crash.
"""
