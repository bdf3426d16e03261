#!/usr/bin/env bash
# Builds, on a machine with a package registry, the wheelhouse an offline node needs: wheels for
# the node's Python and platform of only what its image lacks (the have-list), for
# pyproject.toml's dependencies and the chosen extras, the closure walked by wheelhouse.py.
# Writes OUT_DIR/*.whl and OUT_DIR/wheelhouse.json (target, have-list, each wheel with its
# version, size and the requirement that pulled it in); prints the file list and total size.
# Install it on the node with install.sh (docs/acceptance.md).
#
#   bash benchmarks/accelerator/wheelhouse.sh OUT_DIR [--python=3.12]
#       [--platform=manylinux_x86_64] [--have=FILE] [--extras=test,mllog,coco]
#
# --python: the node's CPython, X.Y or X.Y.Z (default 3.12). --platform: manylinux_x86_64 or
# manylinux_aarch64 (glibc up to 2.39), or manylinux_2_NN_ARCH for an older glibc. --have: `pip
# freeze` / `pip list --format=freeze` output or bare names, one a line, `#` comments allowed
# (default: vendor_image.txt beside this script). --extras: pyproject.toml extras, comma-separated,
# empty for none (default test,mllog,coco: what the node needs to run the tests, --mllog and the
# COCO cross-check; ruff, a developer-only tool, is always left out).
# Exit 0 built, 1 the build failed (the message names the package), 2 bad arguments (one line).
# A non-empty OUT_DIR is refused unless it is an unchanged wheelhouse of ours, whose wheels are
# then replaced. Environment: PYTHON [python3], whose pip does the downloads (pip's cache and
# configuration apply).
set -euo pipefail

# Option names here (their values are checked by wheelhouse.py): an unknown one in one line.
for arg in "$@"; do
  case "$arg" in
    --python=*) ;;
    --platform=*) ;;
    --have=*) ;;
    --extras=*) ;;
    -*)
      echo "wheelhouse.sh: error: unknown option $arg (expected --python=X.Y," \
        "--platform=manylinux_x86_64, --have=FILE, --extras=NAME,...)" >&2
      exit 2
      ;;
  esac
done
exec "${PYTHON:-python3}" "$(dirname "$0")/wheelhouse.py" "$@"
