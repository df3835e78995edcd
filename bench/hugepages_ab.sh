#!/usr/bin/env bash
# The README example's three services with and without glibc's huge-page
# tunable (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which deploy/slurm/lib.sh,
# scripts/run-example.sh and scripts/test.sh export), interleaved: each
# round runs scdino-trainer on configs/small-data.yaml (the whole example,
# 16 epochs, its own threads), then scdino-features (every checkpoint, the
# random ViT and the raw pixels) and scdino-eval, first without the tunable,
# then with it, each into a fresh run directory. Each line: the program's
# wall, user and system seconds and its minor page faults (/usr/bin/time).
#
#   bash bench/hugepages_ab.sh [BUILD_DIR] [ROUNDS]
#   BUILD_DIR: a build with the five programs (default build); ROUNDS: 2
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
rounds=${2:-2}
for p in tools/scdino-synth trainer/scdino-trainer features/scdino-features eval/scdino-eval; do
  [ -x "$build/services/$p" ] || { echo "hugepages_ab.sh: $build/services/$p is not built (bash scripts/setup.sh)" >&2; exit 2; }
done
mode=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/services/tools/scdino-synth" --out "$work/cells" --classes 4 --per-class 128 --channels 5 --size 50 \
    --seed 7 --difficulty 0.6 > /dev/null
echo "THP mode: $mode; glibc $(ldd --version | sed -n '1s/.* //p'); $(nproc) cores"
printf '%-5s %-9s %-16s %8s %8s %8s %10s\n' round tunable program wall user system minflt
for round in $(seq "$rounds"); do
  for tunable in off on; do
    run=$work/runs-$round-$tunable
    sed -e "s|^  output_dir: .*|  output_dir: \"$run\"|" -e "s|^  dataset_dir: .*|  dataset_dir: \"$work/cells\"|" \
        "$src/configs/small-data.yaml" > "$work/run.yaml"
    env=(-u GLIBC_TUNABLES)
    [ "$tunable" = off ] || env=(GLIBC_TUNABLES=glibc.malloc.hugetlb=1)
    for step in "trainer/scdino-trainer" "features/scdino-features --all-checkpoints --random-init --raw-pixels" \
                "eval/scdino-eval"; do
      read -r program flags <<< "$step"
      # shellcheck disable=SC2086
      env "${env[@]}" /usr/bin/time -f "%e %U %S %R" -o "$work/time" \
        "$build/services/$program" --config "$work/run.yaml" $flags > "$work/out.log" 2>&1 ||
        { tail -5 "$work/out.log"; echo "hugepages_ab.sh: $program failed" >&2; exit 1; }
      read -r wall user sys minflt < "$work/time"
      printf '%-5s %-9s %-16s %8s %8s %8s %10s\n' "$round" "$tunable" "$(basename "$program")" "$wall" "$user" "$sys" "$minflt"
    done
  done
done
