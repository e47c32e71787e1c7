#!/usr/bin/env bash
# Builds the side environments in which FedCor's and HiCS-FL's released selection code runs (issue 28,
# items 3 and 6).
#
#   benchmarks/reference/fedcor_hicsfl_env.sh            # both
#   benchmarks/reference/fedcor_hicsfl_env.sh fedcor     # or one of them
#   benchmarks/reference/fedcor_hicsfl_env.sh hicsfl
#
# It creates, outside the repository ($FEDSAMPLE_REFERENCE_DIR, default /tmp/fedsample-reference):
#   venv-fedcor   torch (CPU), numpy                  fedcor-src   Yoruko-Tang/FedCor's src/GPR.py, unmodified
#   venv-hicsfl   numpy, scipy, scikit-learn          hicsfl-src   CityChan/HiCS-FL's server_hics.py, clustering.py
# each with a SOURCE.txt saying where its files came from. fedsample never imports any of it.
#
# Pinned commits (the tips of both repositories), every extracted file checked against its git blob id:
#   Yoruko-Tang/FedCor   d941083ce2840e877476182d898c1ffa878d599b (2023-02-10, "merging data collection into GPR")
#   CityChan/HiCS-FL     25f309d118d72c8ca176b6551704f648b304e100 (2024-09-25, "Update README.md"; the last code
#                        change to server_hics.py and clustering.py is 3ceca3d, 2024-08-05)
# The sources are git directories: FEDCOR_MIRROR and HICSFL_MIRROR (defaults /work/.mirror/<owner>+<name>/repo,
# what a session's fetch tool gives; elsewhere `git clone` each and point the variable at it).
#
# FedCor's GPR.py imports torch and numpy only, so fedcor_authors.py imports it whole. HiCS-FL's
# server_hics.py imports the authors' whole training stack (torchvision, their CNNs and data loaders,
# `progress`), so hicsfl_authors.py reads the class Server_HiCS's selection methods out of its syntax
# tree and runs them on numpy, scipy and scikit-learn; clustering.py imports numpy and scipy only and is
# imported whole.
set -euo pipefail

REF_DIR="${FEDSAMPLE_REFERENCE_DIR:-/tmp/fedsample-reference}"
FEDCOR_MIRROR="${FEDCOR_MIRROR:-/work/.mirror/Yoruko-Tang+FedCor/repo}"
HICSFL_MIRROR="${HICSFL_MIRROR:-/work/.mirror/CityChan+HiCS-FL/repo}"
PYTHON="${PYTHON:-python3}"
FEDCOR_COMMIT=d941083ce2840e877476182d898c1ffa878d599b
HICSFL_COMMIT=25f309d118d72c8ca176b6551704f648b304e100
FEDCOR_PINS="torch==2.13.0 numpy==1.26.4"
HICSFL_PINS="numpy==1.26.4 scipy==1.17.1 scikit-learn==1.9.1"

FEDCOR_FILES="
src/GPR.py 80416e06e87e333bd19836fd9d331e20b0491d3d
src/federated_main.py dd032ab6e82dfcdbc4d4a45c65b2e67e6325673d
src/options.py 8c979028b836ba3b013364cdbada64022c2f5d40
"
HICSFL_FILES="
server/server_hics.py dc1d861e8867cdf913598b4c5b813e254fb13807
clustering.py 4459d0eb4fa784e5edfb403ce49f95673fe2b371
"

source "$(dirname "$0")/_side_env.sh"  # extract and venv

which=("${@:-fedcor hicsfl}")
mkdir -p "$REF_DIR"
for target in ${which[*]}; do
    case "$target" in
    fedcor)
        extract fedcor "$FEDCOR_MIRROR" "$FEDCOR_COMMIT" "$REF_DIR/fedcor-src" "$FEDCOR_FILES"
        # shellcheck disable=SC2086
        venv "$REF_DIR/venv-fedcor" $FEDCOR_PINS
        "$REF_DIR/venv-fedcor/bin/python" "$(dirname "$0")/fedcor_authors.py" --check-source "$REF_DIR/fedcor-src"
        ;;
    hicsfl)
        extract hicsfl "$HICSFL_MIRROR" "$HICSFL_COMMIT" "$REF_DIR/hicsfl-src" "$HICSFL_FILES"
        # shellcheck disable=SC2086
        venv "$REF_DIR/venv-hicsfl" $HICSFL_PINS
        "$REF_DIR/venv-hicsfl/bin/python" "$(dirname "$0")/hicsfl_authors.py" --check-source "$REF_DIR/hicsfl-src"
        ;;
    *)
        echo "fedcor_hicsfl_env.sh: unknown target '$target' (fedcor or hicsfl)" >&2
        exit 2
        ;;
    esac
done
