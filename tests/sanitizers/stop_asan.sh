#!/usr/bin/env bash
# tests/deploy/stop_repeat_test.py with the AddressSanitizer + UBSan trainer
# of BUILD_DIR-asan: six stops (one at each moment the test knows) and a
# rank killed while checkpointing; fails on any report in the job outputs.
#   tests/sanitizers/stop_asan.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
[ -x "$build-asan/services/trainer/scdino-trainer" ] ||
  { echo "FAIL: no $build-asan/services/trainer/scdino-trainer (bash scripts/build-sanitized.sh address)"; exit 1; }
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$src/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
/usr/bin/python3 "$src/tests/deploy/stop_repeat_test.py" "$src" "$build" --bin "$build-asan/services/trainer" \
  --repeats 6 --name stop-asan
work="$build/test-scratch/stop-asan"
if grep -lE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$work"/*.out; then
  echo "FAIL: sanitizer reports in the job outputs above"
  grep -hE -A25 "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$work"/*.out | head -100
  exit 1
fi
echo "ok: the AddressSanitizer trainer stopped, requeued and resumed with no report"
