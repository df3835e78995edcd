#!/bin/bash
# Every program's --help says the exit codes of the one table
# (process/exit_codes.h), as `scdino-config exit-codes --program` prints
# them: no program keeps a list of its own.
# Usage: exit_codes_help_test.sh SOURCE_DIR BUILD_DIR
set -u
build=$2
config="$build/services/tools/scdino-config"
failures=0
for bin in trainer/scdino-trainer features/scdino-features eval/scdino-eval preflight/scdino-preflight \
           tools/scdino-pack tools/scdino-stats tools/scdino-export tools/scdino-config; do
  program=${bin#*/}
  if ! expected=$("$config" exit-codes --program "$program"); then
    echo "FAIL: scdino-config exit-codes --program $program"; failures=$((failures + 1)); continue
  fi
  if ! "$build/services/$bin" --help | grep -qxF -- "$expected"; then
    echo "FAIL: $program --help lacks the table's line: $expected"
    "$build/services/$bin" --help | grep -n "Exit codes" | sed 's/^/  it says: /'
    failures=$((failures + 1))
  fi
done
# A name that is no program's is refused, naming the programs.
if out=$("$config" exit-codes --program scdinoctl 2>&1); then
  echo "FAIL: exit-codes --program scdinoctl was accepted: $out"; failures=$((failures + 1))
elif ! grep -q "not an scdino program (scdino-trainer" <<<"$out"; then
  echo "FAIL: exit-codes --program scdinoctl: $out"; failures=$((failures + 1))
fi
[ "$failures" -eq 0 ] && echo "ok: every program's --help says the table's exit codes"
exit $((failures > 0))
