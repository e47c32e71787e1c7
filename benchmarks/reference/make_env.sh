#!/usr/bin/env bash
# Builds the side environment in which FedScale 1.0's Oort selector runs (issue 25, item 5).
#
#   benchmarks/reference/make_env.sh
#
# It creates, outside the repository,
#   $FEDSAMPLE_REFERENCE_DIR/venv-fedscale   a virtual environment with numpy 1.x from PyPI
#   $FEDSAMPLE_REFERENCE_DIR/fedscale-src    the few FedScale files the selector needs, unmodified
#   $FEDSAMPLE_REFERENCE_DIR/fedscale-src/SOURCE.txt   where they came from
# (FEDSAMPLE_REFERENCE_DIR defaults to /tmp/fedsample-reference). fedsample never imports any of it.
#
# The files come from commit 7ec441c2afa99510535adebe155d89fa8bb2c637 of SymbioticLab/FedScale,
# the tree that PyPI's fedscale 1.0 wheel was built from (its 241 .py files are byte-identical).
# Two sources, checked against the same git blob ids:
#   FEDSCALE_SOURCE=mirror (default): a bare or normal git directory of SymbioticLab/FedScale that
#       holds that commit, at $FEDSCALE_MIRROR (default /work/.mirror/SymbioticLab+FedScale/repo;
#       a session gets it with its fetch tool, `fetch github:SymbioticLab/FedScale`; elsewhere
#       `git clone https://github.com/SymbioticLab/FedScale` and point FEDSCALE_MIRROR at its .git).
#   FEDSCALE_SOURCE=pypi: the fedscale==1.0 wheel from PyPI, downloaded without its dependencies and
#       only unpacked (never installed).
# PYTHON picks the interpreter of the side environment (default python3; 3.9 to 3.12 have numpy
# 1.26 wheels).
set -euo pipefail

REF_DIR="${FEDSAMPLE_REFERENCE_DIR:-/tmp/fedsample-reference}"
MIRROR="${FEDSCALE_MIRROR:-/work/.mirror/SymbioticLab+FedScale/repo}"
SOURCE="${FEDSCALE_SOURCE:-mirror}"
PYTHON="${PYTHON:-python3}"
COMMIT=7ec441c2afa99510535adebe155d89fa8bb2c637
# numpy's legacy RandomState stream (np.random.seed / np.random.choice, what the selector draws
# with) is frozen across releases (NEP 19), so any 1.x gives the same picks; 1.26.4 is the last 1.x.
NUMPY_PIN="numpy==1.26.4"

# path  git-blob-id at $COMMIT
FILES="
fedscale/__init__.py e69de29bb2d1d6434b8b29ae775ad8c2e48c5391
fedscale/cloud/__init__.py e69de29bb2d1d6434b8b29ae775ad8c2e48c5391
fedscale/cloud/client_manager.py 15790fb7bf2b44708075f77cb6a6ea4e2f9a2a96
fedscale/cloud/config_parser.py ecf4938c4c3a946e2a5f1e18e20ab45f74dce84e
fedscale/cloud/internal/__init__.py e69de29bb2d1d6434b8b29ae775ad8c2e48c5391
fedscale/cloud/internal/client_metadata.py 031a11b4fdcf3489a58ed4ee8ced60095b8b92ea
thirdparty/__init__.py 8b137891791fe96927ad78e64b0aad7bded08bdc
thirdparty/oort/__init__.py 5c2bb53cbda75aa5143b2ef2d479b5e8895aeb4d
thirdparty/oort/oort.py 7f1346dd0022d9da61fe4d36b589e88d2513935b
thirdparty/oort/utils/__init__.py e69de29bb2d1d6434b8b29ae775ad8c2e48c5391
thirdparty/oort/utils/lp.py 0b7ee0831f4b90080d854eb248b227f979d784bb
"

SRC="$REF_DIR/fedscale-src"
VENV="$REF_DIR/venv-fedscale"
paths=$(printf '%s\n' "$FILES" | awk 'NF {print $1}')

if [ "$SOURCE" != mirror ] && [ "$SOURCE" != pypi ]; then
    echo "make_env.sh: FEDSCALE_SOURCE must be 'mirror' or 'pypi', got '$SOURCE'" >&2
    exit 2
fi
if [ "$SOURCE" = mirror ] && ! git --git-dir="$MIRROR" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
    if git --git-dir="$MIRROR/.git" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
        MIRROR="$MIRROR/.git"
    else
        echo "make_env.sh: no git directory holding FedScale commit $COMMIT at $MIRROR." >&2
        echo "  Get SymbioticLab/FedScale (a session: its fetch tool, 'fetch github:SymbioticLab/FedScale';" >&2
        echo "  elsewhere: git clone https://github.com/SymbioticLab/FedScale) and set FEDSCALE_MIRROR," >&2
        echo "  or take the same files from PyPI's fedscale 1.0 wheel: FEDSCALE_SOURCE=pypi $0" >&2
        exit 1
    fi
fi
mkdir -p "$REF_DIR"
rm -rf "$SRC"
mkdir -p "$SRC"

case "$SOURCE" in
mirror)
    for path in $paths; do
        mkdir -p "$SRC/$(dirname "$path")"
        git --git-dir="$MIRROR" show "$COMMIT:$path" >"$SRC/$path"
    done
    origin="git commit $COMMIT of SymbioticLab/FedScale, from $MIRROR"
    ;;
pypi)
    wheel_dir="$REF_DIR/wheel"
    rm -rf "$wheel_dir"
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: fedscale==1.0 -d "$wheel_dir"
    "$PYTHON" - "$wheel_dir" "$SRC" $paths <<'EOF'
import pathlib, sys, zipfile
wheel_dir, dest, names = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3:]
(wheel,) = pathlib.Path(wheel_dir).glob("fedscale-1.0-*.whl")
with zipfile.ZipFile(wheel) as archive:
    for name in names:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(archive.read(name))
EOF
    origin="PyPI fedscale==1.0 wheel (files identical to git commit $COMMIT of SymbioticLab/FedScale)"
    ;;
esac

# The same bytes whatever the source: each file's git blob id at the commit.
while read -r path blob; do
    [ -n "$path" ] || continue
    got=$(git hash-object "$SRC/$path")
    if [ "$got" != "$blob" ]; then
        echo "make_env.sh: $path is not the file of commit $COMMIT (blob $got, expected $blob)" >&2
        exit 1
    fi
done <<<"$FILES"
printf 'FedScale Oort selector sources: %s\ncommit %s\n' "$origin" "$COMMIT" >"$SRC/SOURCE.txt"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet "$NUMPY_PIN"
# The selector imports and runs under numpy 1.x (a smoke test, not a check of behaviour).
PYTHONPATH="$SRC" "$VENV/bin/python" -c "
import numpy
from fedscale.cloud.client_manager import ClientManager
from thirdparty.oort.oort import create_training_selector
assert numpy.__version__.startswith('1.'), numpy.__version__
print('side environment ready: numpy', numpy.__version__, '| FedScale', '$COMMIT'[:7], '| $REF_DIR')
"
