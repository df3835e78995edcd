#!/bin/bash
# Every benchmark's --help says what each of its flags means: an option line
# "--name TEXT=default  what it means" with words after the default. A flag
# declared without help makes the program exit 2 naming it (bench_flags.h).
# Usage: flags_help_test.sh BENCH...
set -uo pipefail
for bench in "$@"; do
  name=$(basename "$bench")
  out=$("$bench" --help 2>&1) || { echo "FAIL: $name --help exited $?: $out"; exit 1; }
  flags=$(grep -E '^ +--[a-z]' <<<"$out" | grep -v -- '--version')
  [ -n "$flags" ] || { echo "FAIL: $name --help lists no flags"; exit 1; }
  # A long default pushes the meaning to the next line, indented.
  bare=$(awk '/^ +--[a-z]/ && !/--version/ { if (pending) print pending; pending = (NF < 3) ? $0 : ""; next }
              pending && /^ +[^ -]/ { pending = ""; next }
              { if (pending) print pending; pending = "" }
              END { if (pending) print pending }' <<<"$out")
  [ -z "$bare" ] || { echo "FAIL: $name: flags without a meaning in --help: $bare"; exit 1; }
  echo "ok: $name: $(wc -l <<<"$flags") flags, each with what it means"
done
