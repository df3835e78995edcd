#!/bin/bash
# Each program whose body is in services/programs has a main.cc that
# includes no LibTorch header, directly or through another: the list of the
# headers the compiler's preprocessor opens (-E -H), with the include
# directories the bodies compile with, and its error for one it cannot
# find, name none under torch/, ATen/ or c10/. The same check on a body
# (programs/trainer.cc) must name them, so the check itself can fail.
# Usage: mains_include_no_libtorch_test.sh CXX SERVICES_DIR INCLUDES_FILE
#   INCLUDES_FILE: one include directory a line (tests/programs/CMakeLists.txt)
set -uo pipefail
cxx=$1 services=$2 includes_file=$3
[ -s "$includes_file" ] || { echo "FAIL: no include directories in $includes_file"; exit 1; }
includes=()
# (The compiler's own directories stay its own: given again with -isystem,
# /usr/include hides C headers from libstdc++'s #include_next.)
while IFS= read -r dir; do
  [ -n "$dir" ] || continue
  case $(realpath -m "$dir") in /usr/include | /usr/local/include) continue ;; esac
  includes+=(-isystem "$dir")
done <"$includes_file"
# headers FILE: the headers the compiler opens for FILE, and the one it
# cannot find if any (then it stops, and fails: its status is not ours).
headers() { "$cxx" -std=c++17 -E -H -I "$services" "${includes[@]}" "$1" 2>&1 >/dev/null || true; }
libtorch='(^|[ /])(torch|ATen|c10)/'
body=$(headers "$services/programs/trainer.cc")
grep -qE "$libtorch" <<<"$body" ||
  { echo "FAIL: programs/trainer.cc opens no LibTorch header: the check cannot tell"; grep -m3 -i error <<<"$body"; exit 1; }
n=0
for main in trainer/main.cc features/main.cc eval/main.cc tools/synth_main.cc tools/stats_main.cc \
            tools/pack_main.cc tools/config_main.cc tools/export_main.cc; do
  [ -f "$services/$main" ] || { echo "FAIL: no $main under $services"; exit 1; }
  found=$(headers "$services/$main" | grep -E "$libtorch" | head -3)
  [ -z "$found" ] || { echo "FAIL: services/$main includes LibTorch headers, e.g. $found"; exit 1; }
  n=$((n + 1))
done
echo "ok: $n programs' main.cc open no LibTorch header; programs/trainer.cc does"
