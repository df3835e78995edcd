#!/usr/bin/env bash
# Fuzzes scdino's readers of outside bytes (tests/fuzz/targets.h) with
# libFuzzer, for as long as you give it, outside CI:
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   # default 60 s, every target
#
# Builds BUILD_DIR-fuzz (default build-fuzz) with Debian's clang,
# -fsanitize=fuzzer,address,undefined, and runs each target from its
# checked-in seeds (tests/fuzz/corpus/<target>, which it never changes; new
# inputs go to BUILD_DIR-fuzz/corpus/<target>). A crash input is written to
# tests/fuzz/crashes/<target>/: fix the reader, and commit the input, which
# the test command then replays for good (fuzz.<target>.CorpusAndCrashesReplayed,
# in the normal and the AddressSanitizer tree). Exit 1 when a target crashed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(tiff png jpeg safetensors npy packed config)
dir=${BUILD_DIR:-build}-fuzz
command -v clang++ > /dev/null || { echo "scdino: fuzz.sh needs clang (apt-get install clang)" >&2; exit 2; }
if [ ! -f "$dir/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSCDINO_SANITIZE=address,undefined \
    -DSCDINO_FUZZ=ON -DSCDINO_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link" > "$dir.configure.log" 2>&1 ||
    { echo "scdino: configuring $dir failed: $dir.configure.log" >&2; exit 1; }
fi
args=()
for t in "${targets[@]}"; do args+=(--target "scdino-fuzz-$t"); done
cmake --build "$dir" --parallel "${SCDINO_BUILD_JOBS:-$(nproc)}" "${args[@]}"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TMPDIR=${TMPDIR:-/dev/shm}
crashed=()
for t in "${targets[@]}"; do
  mkdir -p "$dir/corpus/$t" "tests/fuzz/crashes/$t"
  seeds=("tests/fuzz/corpus/$t")
  [ "$t" = config ] && seeds+=(configs)
  echo "scdino: fuzzing $t for $seconds s"
  if ! "$dir/tests/fuzz/scdino-fuzz-$t" -max_total_time="$seconds" -max_len=1048576 -timeout=20 -rss_limit_mb=4096 \
       -artifact_prefix="tests/fuzz/crashes/$t/" "$dir/corpus/$t" "${seeds[@]}" > "$dir/fuzz-$t.log" 2>&1; then
    crashed+=("$t")
    echo "scdino: $t crashed; the input is in tests/fuzz/crashes/$t/ ($dir/fuzz-$t.log says where)"
  fi
  grep -E "^#[0-9]+.*(DONE|pulse)" "$dir/fuzz-$t.log" | tail -1 || true
done
[ ${#crashed[@]} -eq 0 ] || { echo "scdino: crashes in: ${crashed[*]}"; exit 1; }
echo "scdino: no crash in ${targets[*]} ($seconds s each)"
