#!/usr/bin/env bash
# Runs a sanitizer tree's tests (scripts/build-sanitized.sh builds them) and
# fails on any sanitizer report, also one a test would have tolerated (a
# death test's child, a process whose exit code nobody checks).
#
#   tests/sanitizers/run.sh address|thread SOURCE_DIR BUILD_DIR
#
# address: the unit tests of the suites BUILD_DIR-asan builds and the fuzz
# replays (ASan + UBSan;
# LeakSanitizer at exit; scripts/build-sanitized.sh says which). thread:
# BUILD_DIR-tsan's one suite, the tests whose code runs threads
# (tests/sanitizers/CMakeLists.txt). Either way, a run of no test fails.
set -euo pipefail
kind=$1 src=$2 build=$3
supp="$src/tests/sanitizers"
case $kind in
  address)
    tree="$build-asan"
    export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=0:strict_string_checks=1"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
    # The suites not built there are skipped (tests/support/run_suite.sh);
    # the fuzz corpora and crash inputs are replayed here too.
    select=(-L 'unit|fuzz') ;;
  thread)
    tree="$build-tsan"
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp:print_suppressions=0"
    select=(-R '^threads\.') ;;
  *) echo "FAIL: unknown sanitizer kind '$kind'"; exit 1 ;;
esac
[ -f "$tree/CTestTestfile.cmake" ] ||
  { echo "FAIL: no sanitizer tree $tree (bash scripts/build-sanitized.sh $kind builds it)"; exit 1; }
log="$tree/sanitizer-tests.log"
# A test process per core, one thread each (nproc alone would say 1 under
# scripts/test.sh, which sets OMP_NUM_THREADS=1: the suites ran one test at
# a time).
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 SCDINO_SKIP_UNBUILT_SUITES=1
set +e
# Every test's whole output goes to the log (-V), a passing one's too: a
# report that a test tolerated is in no failure's output.
ctest --test-dir "$tree" "${select[@]}" -V --parallel "$cores" --timeout 900 > "$log" 2>&1
rc=$?
set -e
grep -E "tests passed|tests failed|Total Test time" "$log" || true
reports=$(grep -cE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer" "$log" || true)
if [ "$reports" -gt 0 ]; then
  echo "FAIL: $reports sanitizer report(s) in $log:"
  grep -nE -A25 "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer" "$log" | head -150
  exit 1
fi
# A suite the tree does not build counts in "out of N" as skipped: count
# the tests that passed.
if ! grep -qE "^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* +Passed" "$log"; then
  echo "FAIL: no $kind-sanitized test ran in $tree ($log)"
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  echo "FAIL: the $kind-sanitized tests failed (exit $rc):"
  grep -E "\(Failed\)|\(Timeout\)|\(Subprocess aborted\)|\*\*\*" "$log" | head -40
  exit 1
fi
echo "ok: $kind-sanitized tests, no report ($log)"
