#!/bin/bash
# deploy/slurm/lib.sh after a lost node: what the batch shell asks of Slurm
# (scdino_wait, scdino_requeue_or_exit, scdino_fit_requeued_job) and how a
# restarted job runs its steps (scdino_check_geometry), for each order of
# events. Deterministic: `scontrol` and `sinfo` are functions that answer as
# slurmctld 22.05 did on the test cluster (a job Slurm requeued counts the
# restart at once, and shows COMPLETING while this shell runs) and record
# what they were asked; the real job is cluster.ALostNodeResumesTheJobOnTheNodesLeftOrOnceBack.
# Usage: lib_requeue_test.sh SOURCE_DIR
set -u
src=$1
failures=0
calls=$(mktemp)
trap 'rm -f "$calls"' EXIT

# One case, in a subshell (the functions exit): RESTARTS is Slurm's restart
# count as successive `scontrol show job` calls find it (the last one
# repeats; this run started as restart 0), DOWN the nodes sinfo has down.
# ACTION is what the shell does: "requeue RC" (scdino_requeue_or_exit RC)
# or "wait" (scdino_wait on a step, a TERM trapped during the wait). Prints
# the shell's lines.
run_case() {  # ACTION RESTARTS DOWN [ENV=VALUE...]
  local action=$1 restarts=$2 down=$3
  shift 3
  : > "$calls"
  (
    export SLURM_JOB_ID=77 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=4 SLURM_NTASKS_PER_NODE=2
    export SLURM_JOB_NODELIST="node[1-2]" SLURM_RESTART_COUNT=0 SCDINO_NODE_WAIT_S=3
    for kv in "$@"; do export "${kv?}"; done
    # shellcheck source=/dev/null
    . "$src/deploy/slurm/lib.sh"
    for kv in "$@"; do export "${kv?}"; done  # scdino_signal, which lib.sh sets
    read -r -a restart_list <<<"$restarts"
    scontrol() {
      echo "scontrol $*" >> "$calls"
      case "$1 $2" in
        "show job")
          # Each call runs in a command substitution: count them in the file.
          local n i
          n=$(grep -c '^scontrol show job' "$calls")
          # slurmctld timing out on the first STUB_SHOW_FAILS calls.
          if [ "$n" -le "${STUB_SHOW_FAILS:-0}" ]; then
            echo "slurm_load_jobs error: Socket timed out on send/recv operation" >&2
            return 1
          fi
          n=$((n - ${STUB_SHOW_FAILS:-0}))
          i=$((n - 1 < ${#restart_list[@]} ? n - 1 : ${#restart_list[@]} - 1))
          # While any process of the job runs, Slurm shows what it holds.
          # A job Slurm requeued shows COMPLETING while this shell runs;
          # a cancelled one too (STUB_STATE); else RUNNING.
          local state=RUNNING
          [ "${restart_list[$i]}" = 0 ] || state=COMPLETING
          echo "JobId=77 JobName=t JobState=${STUB_STATE:-$state} Restarts=${restart_list[$i]}" \
               "RunTime=${STUB_RUNTIME:-00:05:00} TimeLimit=${STUB_LIMIT:-01:00:00}" \
               "NumNodes=${STUB_NODES:-2} NumTasks=${STUB_TASKS:-4} TRES=cpu=4,node=2,billing=4" ;;
        "show config") echo "SlurmdTimeout           = 15 sec" ;;
        "requeue "*)
          [ -z "${STUB_REQUEUE_FAILS:-}" ] || { echo "Requested operation is presently disabled for job $2"; return 1; } ;;
        *) return 0 ;;
      esac
    }
    sinfo() {
      echo "sinfo $*" >> "$calls"
      local node
      for node in node1 node2 node3; do
        case ",$down," in
          *",$node,"*) echo "$node down*" ;;
          *) case ",${STUB_DRAINING:-}," in *",$node,"*) echo "$node drng" ;; *) echo "$node alloc" ;; esac ;;
        esac
      done
    }
    sleep() { :; }
    case $action in
      requeue*) scdino_requeue_or_exit "${action#requeue }" ;;
      wait)
        waits=0 looks=0
        kill() {  # `kill -0`: the step runs for the first 3 looks, then has ended
          [ "$1" = -0 ] || { command kill "$@"; return; }
          looks=$((looks + 1))
          [ "$looks" -le 3 ]
        }
        wait() {  # the first wait is cut short by a trapped TERM; the second returns the step's 75
          waits=$((waits + 1))
          [ "$waits" = 1 ] || return 75
          scdino_signal=TERM scdino_signals=$((scdino_signals + 1))
          return 143
        }
        scdino_wait 4242
        echo "scdino_wait returned $?" ;;
    esac
  ) 2>&1
}

check() {  # NAME OUTPUT WANT-IN-OUTPUT WANT-CALL NOT-CALL
  local name=$1 out=$2 want=$3 call=$4 not=$5
  if [[ "$out" != *"$want"* ]]; then
    echo "FAIL: $name: the shell said: $out (expected: ...$want...)"
    failures=$((failures + 1))
  elif [ -n "$call" ] && ! grep -qF -- "$call" "$calls"; then
    echo "FAIL: $name: never asked Slurm '$call'; asked: $(tr '\n' ';' < "$calls")"
    failures=$((failures + 1))
  elif [ -n "$not" ] && grep -qF -- "$not" "$calls"; then
    echo "FAIL: $name: asked Slurm '$not', which it must not: $(tr '\n' ';' < "$calls")"
    failures=$((failures + 1))
  else
    echo "ok: $name"
  fi
}

lowered="its task count is now 2 (2 per node on the 1 node(s) left)"
# Slurm first: it found node2 down and requeued the job while the step
# runs; the job-wide TERM cuts the wait short, and the shell fits the job
# at once instead of waiting for ranks that wait on node2.
out=$(run_case wait 1 node2)
check "Slurm first, during the step: fitted at once, no second wait" "$out" "$lowered" \
  "scontrol update JobId=77 NumTasks=2" "scontrol requeue"
[[ "$out" != *"scdino_wait returned"* ]] || { echo "FAIL: waited again for the step: $out"; failures=$((failures + 1)); }
# Slurm's TERM came before it counted the restart: looked at again while
# the step still runs, and fitted then.
out=$(run_case wait "0 0 1" node2)
check "Slurm first, the restart counted a moment after its TERM: fitted on a later look" "$out" "$lowered" \
  "scontrol update JobId=77 NumTasks=2" "scontrol requeue"
# Requeued by Slurm with every node up (a preemption): the step is waited
# for, as it checkpoints at the signal.
out=$(run_case wait 1 "")
check "Slurm requeued it with no node down, during the step: the step waited for" "$out" \
  "scdino_wait returned 75" "" "NumTasks"
# Slurm first, the step having ended by then (any code, after the TERM).
out=$(run_case "requeue 143" 1 node2 scdino_signal=TERM)
check "Slurm first, after the step: fitted" "$out" "$lowered" "scontrol update JobId=77 NumTasks=2" "scontrol requeue"
# Ranks first: exit 9 while Slurm still runs the job; the shell waits for
# Slurm's verdict instead of requeueing (a running job cannot be changed).
out=$(run_case "requeue 9" "0 0 0 1" node2)
check "ranks first: waited for Slurm's requeue, then fitted" "$out" "$lowered" \
  "scontrol update JobId=77 NumTasks=2" "scontrol requeue"
[[ "$out" == *"waiting up to 3 s for Slurm"* ]] || { echo "FAIL: did not say it waits: $out"; failures=$((failures + 1)); }
# A rank lost, no node: Slurm never requeues; after the wait the shell does.
out=$(run_case "requeue 9" 0 "")
check "a rank lost on nodes that answer: requeued as it is after the wait" "$out" \
  "requeueing job 77" "scontrol requeue 77" "NumTasks"
# Requeued by Slurm with no node down (preempted): nothing changed.
out=$(run_case "requeue 143" 1 "" scdino_signal=TERM)
check "requeued by Slurm, no node down: as before" "$out" "none of its nodes is down now" "" "NumTasks"
# Three nodes, two lost: one node's tasks.
out=$(run_case "requeue 9" 1 node2,node3 SLURM_JOB_NUM_NODES=3 SLURM_NTASKS=6 "SLURM_JOB_NODELIST=node[1-3]")
check "three nodes, two lost: the tasks of the one left" "$out" "2 per node on the 1 node(s) left" \
  "scontrol update JobId=77 NumTasks=2" ""
# A signal with the progress saved: requeued at once, no wait.
out=$(run_case "requeue 75" 0 "" scdino_signal=USR1)
check "exit 75 on a running job: requeued at once" "$out" "requeueing job 77" "scontrol requeue 77" "show config"

# scancel: the job is CANCELLED; its shell never requeues it, whatever the
# step's code (75 after the TERM, or killed).
out=$(run_case "requeue 75" 0 "" scdino_signal=TERM STUB_STATE=COMPLETING)
check "a cancelled job is never requeued" "$out" "was cancelled (scancel): not requeued" "" "scontrol requeue"
# slurmctld timing out on the first look at a cancelled job: asked again,
# never taken for a job to requeue.
out=$(run_case "requeue 75" 0 "" scdino_signal=TERM STUB_STATE=CANCELLED STUB_SHOW_FAILS=2)
check "a cancelled job, slurmctld slow to answer: still not requeued" "$out" "was cancelled (scancel): not requeued" \
  "" "scontrol requeue"
# At its time limit Slurm shows the job COMPLETING too: requeued.
out=$(run_case "requeue 75" 0 "" scdino_signal=TERM STUB_STATE=COMPLETING STUB_RUNTIME=01:00:02)
check "at the time limit: requeued" "$out" "requeueing job 77" "scontrol requeue 77" ""
# A requeue that fails (--no-requeue, slurmctld busy) is tried again, then
# ends the job with the step's code, never 0.
out=$(run_case "requeue 75" 0 "" scdino_signal=USR1 STUB_REQUEUE_FAILS=1; echo "exit $?")
check "a failed requeue ends the job with the step's code" "$out" "could not be requeued (Requested operation" \
  "scontrol requeue 77" ""
[[ "$out" == *"exit 75" ]] || { echo "FAIL: a failed requeue did not end with 75: $out"; failures=$((failures + 1)); }
[ "$(grep -c '^scontrol requeue' "$calls")" = 3 ] ||
  { echo "FAIL: the requeue was not tried 3 times: $(tr '\n' ';' < "$calls")"; failures=$((failures + 1)); }
# A draining node is not lost: a requeue by Slurm keeps the geometry.
out=$(run_case "requeue 143" 1 "" scdino_signal=TERM STUB_DRAINING=node2)
check "a draining node is not counted as lost" "$out" "none of its nodes is down now" "" "NumTasks=2"
# Requeued with every node up after an earlier loss lowered the count: back
# to per node x the nodes asked.
out=$(run_case "requeue 143" 1 "" scdino_signal=TERM STUB_TASKS=2)
check "every node up again: the task count restored" "$out" "task count is back to 4" \
  "scontrol update JobId=77 NumTasks=4" ""
# An array task is named ARRAYID_TASKID (its job id may be the array's).
out=$(run_case "requeue 75" 0 "" scdino_signal=USR1 SLURM_ARRAY_JOB_ID=70 SLURM_ARRAY_TASK_ID=2)
check "an array task requeues itself alone" "$out" "requeueing job 70_2" "scontrol requeue 70_2" "scontrol requeue 77"

# A signal to the batch shell alone (B:USR1@T, scancel --batch) is handed to
# the running step once, so that its tasks checkpoint.
out=$(
  (
    export SLURM_JOB_ID=77 SLURM_RESTART_COUNT=0
    # shellcheck source=/dev/null
    . "$src/deploy/slurm/lib.sh"
    scontrol() { echo "JobId=77 JobState=RUNNING Restarts=0"; }
    bash -c 'trap "echo step got USR1; exit 75" USR1; for i in $(seq 100); do sleep 0.05; done' &
    scdino_step_pid=$!
    sleep 0.3
    kill -USR1 "$BASHPID"
    kill -USR1 "$BASHPID"
    rc=0
    scdino_wait "$scdino_step_pid" || rc=$?
    echo "step ended $rc after $scdino_signals signal(s)"
  ) 2>&1
)
if [[ "$out" == *"step got USR1"*"step ended 75 after 2 signal(s)"* ]] && [ "$(grep -c 'step got USR1' <<<"$out")" = 1 ]; then
  echo "ok: a USR1 to the batch shell reaches the step once"
else
  echo "FAIL: a USR1 to the batch shell should reach the step once: $out"
  failures=$((failures + 1))
fi

# The restarted job's geometry: never refused; as asked where the nodes
# have room, else as Slurm laid it out.
geometry() {  # ENV=VALUE...: prints the shell's lines, then the srun flags
  (
    for kv in "$@"; do export "${kv?}"; done
    # shellcheck source=/dev/null
    . "$src/deploy/slurm/lib.sh"
    scdino_check_geometry
    echo "flags: ${scdino_geometry[*]}"
  ) 2>&1
}
base=(SLURM_JOB_ID=77 SLURM_NTASKS_PER_NODE=2 SLURM_CPUS_PER_TASK=1)
out=$(geometry "${base[@]}" SLURM_RESTART_COUNT=1 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=2 SLURM_CPUS_ON_NODE=2 \
  "SLURM_TASKS_PER_NODE=1(x2)")
check "restart on 2 nodes with the lowered count and room: 2 per node" "$out" \
  "flags: --nodes=2 --ntasks=4 --ntasks-per-node=2" "" ""
out=$(geometry "${base[@]}" SLURM_RESTART_COUNT=1 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=2 SLURM_CPUS_ON_NODE=2 \
  SLURM_GPUS_ON_NODE=1 SLURM_GPUS_PER_TASK=1 "SLURM_TASKS_PER_NODE=1(x2)")
check "restart with one GPU a node: the tasks Slurm laid out" "$out" "so the steps run the 2 task(s) Slurm laid out" \
  "" ""
[[ "$out" == *"flags: " ]] || { echo "FAIL: srun flags set: $out"; failures=$((failures + 1)); }
out=$(geometry "${base[@]}" SLURM_RESTART_COUNT=0 SLURM_JOB_NUM_NODES=2 SLURM_NTASKS=2 SLURM_CPUS_ON_NODE=2)
check "a first start with another --ntasks is still refused" "$out" "another --ntasks" "" ""
out=$(geometry "${base[@]}" SLURM_RESTART_COUNT=1 SLURM_JOB_NUM_NODES=1 SLURM_NTASKS=2 SLURM_CPUS_ON_NODE=2)
if [ "$out" = "flags: " ]; then
  echo "ok: restart as asked: nothing said, nothing added"
else
  echo "FAIL: restart as asked: expected no line and no srun flags, got: $out"
  failures=$((failures + 1))
fi

[ "$failures" = 0 ] || { echo "FAIL: $failures case(s)"; exit 1; }
echo "ok: after a lost node the batch shell asks Slurm what it can do, and says it"
