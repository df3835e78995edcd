#!/bin/bash
# scdino-trainer links eval's core alone (kNN for the learning check): no
# function of eval's embedding or report layers is in the binary. The
# functions are those the two libraries define (nm, text symbols); the
# same check on scdino-eval, which carries both layers, must find them, so
# the check itself can fail.
# Usage: carries_no_embedding_or_report_test.sh TRAINER EVAL LIBEMBEDDINGS.a LIBREPORT.a
set -uo pipefail
trainer=$1 evaluator=$2
shift 2
layer=$(mktemp)
trap 'rm -f "$layer"' EXIT
functions() { nm -C --defined-only "$@" 2>/dev/null | awk '$2 == "T"' | cut -d' ' -f3- | grep '^scdino::' | sort -u; }
functions "$@" > "$layer"
[ -s "$layer" ] || { echo "FAIL: no functions found in $*"; exit 1; }
carried() { functions "$1" | comm -12 - "$layer"; }
in_eval=$(carried "$evaluator" | wc -l)
[ "$in_eval" -gt 0 ] || { echo "FAIL: scdino-eval carries none of the $(wc -l < "$layer") layer functions: the check cannot tell"; exit 1; }
found=$(carried "$trainer")
if [ -n "$found" ]; then
  echo "FAIL: scdino-trainer carries $(wc -l <<<"$found") function(s) of eval's embedding or report layers, e.g.:"
  head -5 <<<"$found"
  exit 1
fi
echo "ok: scdino-trainer carries none of the $(wc -l < "$layer") functions of eval's embedding and report layers" \
     "(scdino-eval carries $in_eval of them)"
