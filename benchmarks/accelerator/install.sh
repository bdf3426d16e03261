#!/usr/bin/env bash
# Installs a wheelhouse from wheelhouse.sh on the node, offline: pip with --no-index and --no-deps
# (the wheelhouse holds the closure; everything else is the image's), into DIR, then checks that
# every third-party module hpcai_jax imports imports (python3 -m hpcai_jax.third_party) with DIR
# on PYTHONPATH, and prints the `export PYTHONPATH=...` line to use.
#
#   bash benchmarks/accelerator/install.sh WHEELHOUSE [--target=DIR]
#
# --target: where the packages go (default WHEELHOUSE/site; replaced on a second install), or
# `none` for the environment of PYTHON itself (a venv, or a user-writable image).
# Exit 0 installed and every required module imports; 1 the install failed or a required module
# is missing (each named, with the files that import it); 2 bad arguments (one line on stderr).
# Environment: PYTHON [python3], the node's interpreter.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"

die() {
  echo "install.sh: error: $*" >&2
  exit 2
}

WHEELHOUSE="" TARGET=""
for arg in "$@"; do
  case "$arg" in
    --target=*)
      TARGET="${arg#*=}"
      [ -n "$TARGET" ] || die "--target=: expected a directory or none"
      ;;
    -*) die "unknown option $arg (expected --target=DIR or --target=none)" ;;
    *)
      [ -z "$WHEELHOUSE" ] || die "one WHEELHOUSE expected, got $WHEELHOUSE and $arg"
      WHEELHOUSE="$arg"
      ;;
  esac
done
[ -n "$WHEELHOUSE" ] || die "no WHEELHOUSE: usage: install.sh WHEELHOUSE [--target=DIR|none]"
[ -d "$WHEELHOUSE" ] || die "WHEELHOUSE $WHEELHOUSE: not a directory (expected wheelhouse.sh's OUT_DIR)"
WHEELHOUSE="$(cd "$WHEELHOUSE" && pwd)"
# A wheelhouse for another Python: say so in one line rather than in pip's words per wheel.
if [ -f "$WHEELHOUSE/wheelhouse.json" ]; then
  "$PYTHON" - "$WHEELHOUSE/wheelhouse.json" <<'PY' || exit 1
import json, sys
try:
    built = json.load(open(sys.argv[1]))["target"]["python"]
except (OSError, ValueError, KeyError, TypeError):
    sys.exit(0)  # not one of ours: pip judges each wheel
here = "%d.%d" % sys.version_info[:2]
if built != here:
    sys.exit(f"install.sh: error: the wheelhouse is for Python {built}; {sys.executable} is {here}")
PY
fi

[ -n "$TARGET" ] || TARGET="$WHEELHOUSE/site"
if [ "$TARGET" != none ]; then
  [ ! -e "$TARGET" ] || [ -d "$TARGET" ] || die "--target=$TARGET: exists and is not a directory"
  mkdir -p "$TARGET" || die "--target=$TARGET: cannot create it"
  TARGET="$(cd "$TARGET" && pwd)"
fi

# pip's own deprecation warnings are not ours to fail on (a test run sets them to errors).
PIP=(env -u PYTHONWARNINGS "$PYTHON" -m pip install --disable-pip-version-check --no-input
  --no-index --find-links "$WHEELHOUSE" --no-deps)
shopt -s nullglob
WHEELS=("$WHEELHOUSE"/*.whl)
if [ ${#WHEELS[@]} -eq 0 ]; then
  echo "install.sh: $WHEELHOUSE holds no wheels: nothing to install"
elif [ "$TARGET" = none ]; then
  "${PIP[@]}" "${WHEELS[@]}"
else
  # --upgrade: pip --target leaves a package already in DIR alone without it.
  "${PIP[@]}" --upgrade --target "$TARGET" "${WHEELS[@]}"
fi

if [ "$TARGET" = none ]; then
  echo "install.sh: installed into the environment of $PYTHON: no PYTHONPATH needed"
  CHECK_PATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
else
  # Printed for the caller to paste; expanded there, so single quotes here.
  # shellcheck disable=SC2016
  echo "export PYTHONPATH=$TARGET"'${PYTHONPATH:+:$PYTHONPATH}'
  CHECK_PATH="$TARGET:$REPO${PYTHONPATH:+:$PYTHONPATH}"
fi
echo "install.sh: import check (python3 -m hpcai_jax.third_party)"
PYTHONPATH="$CHECK_PATH" "$PYTHON" -m hpcai_jax.third_party
