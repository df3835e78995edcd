# Sourced by the shell tests (tests/deploy, tests/monitoring): where they
# work and what they run, and the tiny model every one of them trains.
#
#   source "$(dirname "$0")/../support/lib.sh" NAME SOURCE_DIR BUILD_DIR
#
# Sets src, build, a fresh work directory ($build/test-scratch/NAME), py
# (Debian's python3: numpy, anndata, grpcio), ctl (scdinoctl) and
# TINY_HYPERPARAMETERS (a YAML flow mapping for train_scDINO.hyperparameters).
src=$2
build=$3
work="$build/test-scratch/$1"
rm -rf "$work"
mkdir -p "$work"
py=/usr/bin/python3
ctl="$build/services/ctl/scdinoctl"
TINY_HYPERPARAMETERS="{arch: vit_tiny, embed_dim: 32, depth: 2, num_heads: 2, patch_size: 8, global_crops_size: 16,
                    local_crops_size: 8, local_crops_number: 2, out_dim: 64, head_hidden_dim: 32,
                    head_bottleneck_dim: 16, warmup_epochs: 1, drop_path_rate: 0.0}"
