#!/usr/bin/env bash
# Builds the side environments in which DivFL's and FLSim's released selectors run (issue 25, item 5),
# and DELTA's (issue 28, item 1).
#
#   benchmarks/reference/make_env_selectors.sh            # all three
#   benchmarks/reference/make_env_selectors.sh divfl      # or only one of them
#   benchmarks/reference/make_env_selectors.sh flsim
#   benchmarks/reference/make_env_selectors.sh delta
#
# It creates, outside the repository ($FEDSAMPLE_REFERENCE_DIR, default /tmp/fedsample-reference):
#   venv-divfl   numpy 1.x from PyPI            divfl-src   melodi-lab/divfl's server files, unmodified
#   venv-flsim   torch (CPU), omegaconf, hydra  flsim-src   FLSim's selector module and what it imports
#   venv-delta   torch (CPU), numpy             delta-src   L3030/DELTA_FL's two local_update files, unmodified
# each with a SOURCE.txt saying where its files came from. fedsample never imports any of it.
#
# Pinned commits, and every extracted file checked against its git blob id there:
#   melodi-lab/divfl            4a5b80df85a72b97751ce1130ee5c7d76a2c1540 (2022-08-02, the tip; the only code commit
#                               is 8e2a4bc "first commit", later ones touch README.md only)
#   facebookresearch/FLSim      82b7fb36de8926e1b63fcc15d0ddc63caad71e2f (2022-06-03, the last commit that has
#                               HighLossActiveUserSelector and NumberOfSamplesActiveUserSelector: its child
#                               202df7a "Remove unused user selectors" deletes them)
#   L3030/DELTA_FL              bc8e3a7aed6691ea6a954837656437721edf81e7 (2024-04-02, the tip: "Add files via upload")
# The sources are git directories of the repositories: DIVFL_MIRROR, FLSIM_MIRROR and DELTA_MIRROR (defaults
# /work/.mirror/<owner>+<name>/repo, what a session's fetch tool gives; elsewhere `git clone` each and
# point the variable at its .git).
#
# Only the selectors run: DivFL's server code imports TensorFlow 1.x at module level, so the driver
# reads the class BaseFedarated's methods out of fedbase.py's syntax tree and runs them on numpy
# (they use numpy alone). FLSim's selector module is loaded with its package __init__ files skipped
# (they pull in the whole simulator); it imports torch, omegaconf and hydra (flsim/utils/config_utils.py).
# PYTHON picks the side environments' interpreter (default python3; the torch wheel must exist for it).
set -euo pipefail

REF_DIR="${FEDSAMPLE_REFERENCE_DIR:-/tmp/fedsample-reference}"
DIVFL_MIRROR="${DIVFL_MIRROR:-/work/.mirror/melodi-lab+divfl/repo}"
FLSIM_MIRROR="${FLSIM_MIRROR:-/work/.mirror/facebookresearch+FLSim/repo}"
DELTA_MIRROR="${DELTA_MIRROR:-/work/.mirror/L3030+DELTA_FL/repo}"
PYTHON="${PYTHON:-python3}"
DIVFL_COMMIT=4a5b80df85a72b97751ce1130ee5c7d76a2c1540
FLSIM_COMMIT=82b7fb36de8926e1b63fcc15d0ddc63caad71e2f
DELTA_COMMIT=bc8e3a7aed6691ea6a954837656437721edf81e7
NUMPY_PIN="numpy==1.26.4"
# torch.multinomial draws for FLSim's selectors (any torch >= 1.10 runs the module); numpy for the population.
FLSIM_PINS="torch==2.13.0 omegaconf==2.3.0 hydra-core==1.3.2 numpy==1.26.4"
# DELTA's reweight_prac computes with torch tensors (torch.norm); numpy for the driver's inputs.
DELTA_PINS="torch==2.13.0 numpy==1.26.4"

DIVFL_FILES="
flearn/trainers/fedbase.py 4bcd53847b9361024f8e24f985572c72e6cb1fb6
flearn/trainers/fedavg.py 1caf048b13d2a6e44d818adc5963de9a96a31551
"
FLSIM_FILES="
flsim/__init__.py a9fdb3b996b73ba9ae811fa42fb7615768a928fc
flsim/active_user_selectors/__init__.py 8f0fc78a5d23edf8bea6be56619a5702e6ffeb20
flsim/active_user_selectors/simple_user_selector.py ebf969a15b5c8601bcd1cf4818274964379fbfe0
flsim/data/__init__.py 645cc97332f92f22a9f57dd5a45f406d917838aa
flsim/data/data_provider.py c76908a3da28a76e5300723d8677f6928f953ceb
flsim/interfaces/__init__.py a9fdb3b996b73ba9ae811fa42fb7615768a928fc
flsim/interfaces/batch_metrics.py 23ae95601762bbe7a5c0cb1a301b1c35f31ee043
flsim/interfaces/model.py 47d3d8e2dc751518cdc1390d7512b803beec7166
flsim/utils/__init__.py a9fdb3b996b73ba9ae811fa42fb7615768a928fc
flsim/utils/config_utils.py 253bdf891b99645f6ac31a76622c8f7f45455c30
"
# A path may hold spaces (DELTA's folder "Femnist and CIfar-10"): the blob id is the line's last field.
DELTA_FILES="
Femnist and CIfar-10/local_update.py f2d99508f9388c5403cb8433edd4e3f04a1f2c7a
LEAF/local_update_FEMNIST.py 0bbea280e686e5369f22ad805e4a1b9066939b88
"

source "$(dirname "$0")/_side_env.sh"  # extract and venv

which=("${@:-divfl flsim delta}")
mkdir -p "$REF_DIR"
for target in ${which[*]}; do
    case "$target" in
    divfl)
        extract divfl "$DIVFL_MIRROR" "$DIVFL_COMMIT" "$REF_DIR/divfl-src" "$DIVFL_FILES"
        venv "$REF_DIR/venv-divfl" "$NUMPY_PIN"
        "$REF_DIR/venv-divfl/bin/python" "$(dirname "$0")/divfl_authors.py" --check-source "$REF_DIR/divfl-src"
        ;;
    flsim)
        extract flsim "$FLSIM_MIRROR" "$FLSIM_COMMIT" "$REF_DIR/flsim-src" "$FLSIM_FILES"
        # shellcheck disable=SC2086
        venv "$REF_DIR/venv-flsim" $FLSIM_PINS
        "$REF_DIR/venv-flsim/bin/python" "$(dirname "$0")/flsim_selectors.py" --check-source "$REF_DIR/flsim-src"
        ;;
    delta)
        extract delta "$DELTA_MIRROR" "$DELTA_COMMIT" "$REF_DIR/delta-src" "$DELTA_FILES"
        # shellcheck disable=SC2086
        venv "$REF_DIR/venv-delta" $DELTA_PINS
        "$REF_DIR/venv-delta/bin/python" "$(dirname "$0")/delta_authors.py" --check-source "$REF_DIR/delta-src"
        ;;
    *)
        echo "make_env_selectors.sh: unknown target '$target' (divfl, flsim or delta)" >&2
        exit 2
        ;;
    esac
done
