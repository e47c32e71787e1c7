#!/usr/bin/env bash
# Builds the side environment in which MIFA's released code runs (issue 35, item 1): Gu et al.'s own
# repository, whose trainers `fdu` (MIFA, what its run scripts run) and `fdu_no_wait` (MIFA from an empty
# memory) fedsample's `mifa` policy is compared with.
#
#   benchmarks/reference/make_env_mifa.sh
#
# It creates, outside the repository ($FEDSAMPLE_REFERENCE_DIR, default /tmp/fedsample-reference):
#   venv-mifa   torch (CPU), numpy     mifa-src   the trainers, models, optimizer and utilities, unmodified
# with a SOURCE.txt saying where the files came from. fedsample never imports any of it.
#
# Pinned commit, and every extracted file checked against its git blob id there:
#   hmgxr128/MIFA_code   c1099d97a3d47bd8ed94bb1daeb28d20a3b89aa4 (2021-10-25, the tip: "Delete .DS_Store"; the
#                        code is that of 81bb3cc "first commit")
# The source is a git directory of the repository: MIFA_MIRROR (default /work/.mirror/hmgxr128+MIFA_code/repo,
# what a session's fetch tool gives; elsewhere `git clone` it and point the variable at its .git).
#
# The driver (mifa/mifa_authors.py) builds the released FDUTrainer / FDU_nowait_Trainer and calls its train()
# unmodified; the data, the model's training, the availability coins and the evaluation are stand-ins.
# The released README asks for PyTorch 1.0 and numpy 1.16; the lines that run use nothing that changed since.
# PYTHON picks the side environment's interpreter (default python3; the torch wheel must exist for it).
set -euo pipefail

REF_DIR="${FEDSAMPLE_REFERENCE_DIR:-/tmp/fedsample-reference}"
MIFA_MIRROR="${MIFA_MIRROR:-/work/.mirror/hmgxr128+MIFA_code/repo}"
PYTHON="${PYTHON:-python3}"
MIFA_COMMIT=c1099d97a3d47bd8ed94bb1daeb28d20a3b89aa4
MIFA_PINS="torch==2.13.0 numpy==1.26.4"
MIFA_FILES="
src/trainers/base.py d9f9ca87f5b9d9b7c58f8b263d9169955f1b747e
src/trainers/fdu.py 9edfd95b13b83de9517f59a948585b42cf0a6cd7
src/trainers/fdu_no_wait.py 9acf2e1b85784e408e0167ffc7d7bfc44b776769
src/models/client.py 6f44b2f25e19432a28832b72129771d9fd6abf2a
src/models/worker.py 05af89e5a3f7773dc2903d0568d99237d3685a5e
src/models/model.py 286c60512a6ce93fa874feb466a0beb740a5b020
src/models/vgg.py 3f1b03084a16b87964815fe77955fa285adfc684
src/optimizers/gd.py 06a76f57ac3e90a41fc58820ff7bfe8facb1690a
src/utils/torch_utils.py b83aa69711bb3edfe10bbf17aee56a779dc844f6
"

source "$(dirname "$0")/_side_env.sh"  # extract and venv
dest="$REF_DIR/mifa-src"
extract mifa "$MIFA_MIRROR" "$MIFA_COMMIT" "$dest" "$MIFA_FILES"
# shellcheck disable=SC2086
venv "$REF_DIR/venv-mifa" $MIFA_PINS
"$REF_DIR/venv-mifa/bin/python" "$(dirname "$0")/mifa/mifa_authors.py" --check-source "$dest"
