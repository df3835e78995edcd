#!/bin/bash
# Each program whose body is in services/programs has a main.cc that
# includes no LibTorch header, directly or through another: the compiler's
# own list of the headers it opens (-H), and its errors for those it cannot
# find (LibTorch's include directories are not given), name none under
# torch/, ATen/ or c10/. The same check on a body (programs/trainer.cc)
# must name them, so the check itself can fail.
# Usage: mains_include_no_libtorch_test.sh CXX SERVICES_DIR
set -uo pipefail
cxx=$1 services=$2
# headers FILE: the headers the compiler opens for FILE, and the one it
# cannot find if any (then it stops, and fails: its status is not ours).
headers() { "$cxx" -std=c++17 -fsyntax-only -H -I "$services" "$1" 2>&1 >/dev/null || true; }
libtorch='(^|[ /])(torch|ATen|c10)/'
body=$(headers "$services/programs/trainer.cc")
grep -qE "$libtorch" <<<"$body" ||
  { echo "FAIL: programs/trainer.cc opens no LibTorch header: the check cannot tell"; exit 1; }
n=0
for main in trainer/main.cc features/main.cc eval/main.cc tools/synth_main.cc tools/stats_main.cc \
            tools/pack_main.cc tools/config_main.cc tools/export_main.cc; do
  [ -f "$services/$main" ] || { echo "FAIL: no $main under $services"; exit 1; }
  found=$(headers "$services/$main" | grep -E "$libtorch" | head -3)
  [ -z "$found" ] || { echo "FAIL: services/$main includes LibTorch headers, e.g. $found"; exit 1; }
  n=$((n + 1))
done
echo "ok: $n programs' main.cc open no LibTorch header; programs/trainer.cc does"
