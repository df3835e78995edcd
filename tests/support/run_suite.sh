#!/usr/bin/env bash
# Runs one GoogleTest suite whole, as one CTest test (tests/CMakeLists.txt).
#
#   bash tests/support/run_suite.sh SUITE_BINARY [GTEST_ARGS...]
#
# A suite that was not built fails, naming it, unless
# SCDINO_SKIP_UNBUILT_SUITES=1 (a tree that builds only some suites: the
# sanitizer trees, the GPU image's compiling stage, the dependency pack's
# build), where it exits 77, which CTest reports as skipped.
set -uo pipefail
bin=$1
shift
if [ ! -x "$bin" ]; then
  if [ "${SCDINO_SKIP_UNBUILT_SUITES:-0}" = 1 ]; then
    echo "scdino: $bin is not built in this tree: skipped (SCDINO_SKIP_UNBUILT_SUITES=1)"
    exit 77
  fi
  echo "FAIL: $bin is not built (cmake --build with its target builds it)"
  exit 1
fi
exec "$bin" "$@"
