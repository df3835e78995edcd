#!/usr/bin/env bash
# Read + augment throughput: scdino's loader against the same recipe in a
# torchvision DataLoader, on the same cores and the same TIFF data set
# (scDINO-shaped: 50 x 50 px, 5 channels). Installs Debian's python3-torch,
# python3-torchvision and python3-tifffile for the baseline.
#
#   bash bench/run-data-bench.sh [CORES]
set -euo pipefail
cd "$(dirname "$0")/.."
cores=${1:-$(nproc)}
bash scripts/setup.sh
if ! /usr/bin/python3 -c 'import torchvision, tifffile' 2>/dev/null; then
  apt-get install -y -qq --no-install-recommends python3-torchvision python3-tifffile > /dev/null
fi
data=${SCDINO_BENCH_DATA:-build/bench-data/cells}
if [ ! -d "$data" ]; then
  build/services/tools/scdino-synth --out "$data" --classes 8 --per-class 128 --channels 5 --size 50 --seed 1
fi
export OMP_WAIT_POLICY=PASSIVE
cpp=$(build/bench/scdino-bench-data --data "$data" --batch 32 --batches 60 --threads "$cores" --loader-threads "$cores")
py=$(/usr/bin/python3 bench/python_pipeline.py --data "$data" --batch 32 --batches 60 --workers "$cores")
echo "$cpp"
echo "$py"
python3 -c "import json,sys; c=json.loads(sys.argv[1]); p=json.loads(sys.argv[2]); print(json.dumps({'ratio_scdino_over_python': c['images_per_s']/p['images_per_s'], 'cores': int(sys.argv[3])}))" "$cpp" "$py" "$cores"
