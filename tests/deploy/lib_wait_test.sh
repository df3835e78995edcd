#!/bin/bash
# deploy/slurm/lib.sh's scdino_wait returns the step's own exit code in every
# order of a trapped signal, the trap and the step's end. Deterministic: the
# shell's `wait` and `kill` are replaced by functions that play one
# interleaving each (a trap that runs during a wait is played by the stub
# counting the signal and returning 128 + its number, as bash does).
# Usage: lib_wait_test.sh SOURCE_DIR
set -u
src=$1
# shellcheck source=/dev/null
. "$src/deploy/slurm/lib.sh"
failures=0

# play STEP...: each call of `wait` takes the next step: "code" returns the
# code; "trap:code" runs the trap (a TERM) and returns the code. `kill -0`
# says the step is gone: the kernel no longer knows it, as after bash reaped
# it, which is where the old scdino_wait lost the code.
play() { script=("$@"); calls=0; }
wait() {
  local step=${script[$calls]:-}
  calls=$((calls + 1))
  [ -n "$step" ] || { echo "FAIL: wait called more often than the interleaving plays ($calls)"; return 127; }
  if [ "${step%%:*}" = trap ]; then
    scdino_signal=TERM scdino_signals=$((${scdino_signals:-0} + 1))
    return "${step#trap:}"
  fi
  return "$step"
}
kill() { [ "$1" = -0 ] && return 1; command kill "$@"; }

expect() {
  local name=$1 want=$2 got
  shift 2
  play "$@"
  scdino_wait 4242 && got=0 || got=$?
  if [ "$got" = "$want" ] && [ "$calls" = "${#script[@]}" ]; then
    echo "ok: $name: $got after ${calls} wait(s)"
  else
    echo "FAIL: $name: scdino_wait returned $got after $calls wait(s), expected $want after ${#script[@]}"
    failures=$((failures + 1))
  fi
}

expect "the step ends, no signal" 0 0
expect "the step fails, no signal" 1 1
expect "the step ends by a signal of its own (no trap here)" 143 143
expect "a signal cuts the wait short, the step then requeues itself" 75 trap:143 75
expect "a signal cuts the wait short, the step ends before the next wait (bash reaped it)" 0 trap:143 0
expect "a signal cuts the wait short, the step diverged meanwhile" 5 trap:143 5
expect "the step ends and the trap runs just after the wait returned its code" 5 trap:5 5
expect "two signals, then the step's code" 4 trap:138 trap:143 4

# What the loop relies on, with the real builtins: a wait cut short by a
# trapped signal, the job ended and reaped by bash meanwhile, and a second
# wait still returns the job's code.
unset -f wait kill
( sleep 0.6; exit 7 ) &
job=$!
( sleep 0.1; kill -USR1 $$ ) &
wait "$job"
first=$?
sleep 1
kill -0 "$job" 2>/dev/null && echo "FAIL: the job should have ended and been reaped"
wait "$job"
second=$?
if [ "$first" -gt 128 ] && [ "$second" = 7 ]; then
  echo "ok: bash: the cut-short wait gave $first, the next one the ended job's code $second"
else
  echo "FAIL: bash: the cut-short wait gave $first, the next one $second (expected > 128, then 7)"
  failures=$((failures + 1))
fi
[ "$failures" = 0 ] || { echo "FAIL: $failures interleaving(s) lost the step's exit code"; exit 1; }
echo "ok: scdino_wait returns the step's exit code in every interleaving"
