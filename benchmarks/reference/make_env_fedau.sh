#!/usr/bin/env bash
# Builds the side environment in which IBM/fedau's released code runs (issue 28, item 2): FedAU, MIFA and
# FedVARP as one repository runs all three.
#
#   benchmarks/reference/make_env_fedau.sh
#
# It creates, outside the repository ($FEDSAMPLE_REFERENCE_DIR, default /tmp/fedsample-reference):
#   venv-fedau   torch (CPU), numpy     fedau-src   main.py, config.py, util/ of IBM/fedau, unmodified
# with a SOURCE.txt saying where the files came from. fedsample never imports any of it.
#
# Pinned commit, and every extracted file checked against its git blob id there:
#   IBM/fedau   6e9cce9b2e568666b5c3e0fab8f092a539884d7b (2024-01-22, "Initial commit", the only commit)
# The source is a git directory of the repository: FEDAU_MIRROR (default /work/.mirror/IBM+fedau/repo, what a
# session's fetch tool gives; elsewhere `git clone https://github.com/IBM/fedau` and point it at its .git).
#
# The driver (fedau_authors.py) runs main.py as the authors run it (`python3 main.py -weighting ...`),
# with the data set, the model, the statistics writer and torchvision replaced by stand-ins (the
# training loop, the weighting and the aggregation are main.py's own lines). The released environment
# asks for torch 1.13.1 and Python 3.9; the lines that run use nothing that changed since.
# PYTHON picks the side environment's interpreter (default python3; the torch wheel must exist for it).
set -euo pipefail

REF_DIR="${FEDSAMPLE_REFERENCE_DIR:-/tmp/fedsample-reference}"
FEDAU_MIRROR="${FEDAU_MIRROR:-/work/.mirror/IBM+fedau/repo}"
PYTHON="${PYTHON:-python3}"
FEDAU_COMMIT=6e9cce9b2e568666b5c3e0fab8f092a539884d7b
FEDAU_PINS="torch==2.13.0 numpy==1.26.4"
FEDAU_FILES="
main.py 869e7e80ee812419cc15d1e91b787f711d2ed006
config.py 2d02260a8aec58acc8599dbf90718bf9a9d7acbf
util/__init__.py e69de29bb2d1d6434b8b29ae775ad8c2e48c5391
util/util.py 304b24e31b3b2f02c7674463147f0bcdf789cf0f
"

source "$(dirname "$0")/_side_env.sh"  # extract and venv
dest="$REF_DIR/fedau-src"
extract fedau "$FEDAU_MIRROR" "$FEDAU_COMMIT" "$dest" "$FEDAU_FILES"
# shellcheck disable=SC2086
venv "$REF_DIR/venv-fedau" $FEDAU_PINS
"$REF_DIR/venv-fedau/bin/python" "$(dirname "$0")/fedau_authors.py" --check-source "$dest"
