# Shared by deploy/slurm/*.sbatch: run a job step so that the job survives a
# job-wide SIGTERM, and requeue after a stop by a signal.
#
# A job-wide SIGTERM (`scancel --signal=TERM --full`, a preemption that
# signals the batch step) reaches the batch shell as well as the steps.
# Untrapped, it kills this shell, so nothing requeues the job. The trap only
# records the signal; the shell waits for the step and requeues.

scdino_signal=""
trap 'scdino_signal=TERM' TERM
trap 'scdino_signal=USR1' USR1

# scdino_wait PID: waits for a background step through signals delivered to
# this shell and returns its exit code.
scdino_wait() {
  local pid=$1 rc
  while :; do
    wait "$pid"
    rc=$?
    # wait returns early (code > 128) when a trapped signal arrives.
    kill -0 "$pid" 2>/dev/null || break
  done
  return "$rc"
}

# scdino_step CMD...: runs `srun CMD...` and returns its exit code.
scdino_step() {
  srun "$@" &
  scdino_wait $!
}

# scdino_requeue_or_exit RC: exit code 75 means stopped by a signal with the
# progress saved: requeue the job (at most SCDINO_MAX_REQUEUES times, 20 by
# default, counted by Slurm's SLURM_RESTART_COUNT) and end this run of it.
# A step that ended otherwise after this shell got a signal is requeued too:
# a job-wide SIGTERM also reaches srun, which then kills its tasks at once
# (srun's own handling of SIGTERM), so they had no time to checkpoint; the
# job resumes from the last checkpoint, exactly as it would have continued
# from there (scdino.checkpoint_every_minutes bounds what is redone). 0 (done)
# and 4 (stopped through the control API) are never requeued. Any other code
# ends the job with it; 0 returns.
scdino_requeue_or_exit() {
  local rc=$1 max=${SCDINO_MAX_REQUEUES:-20} restarts=${SLURM_RESTART_COUNT:-0} why
  if [ "$rc" -eq 75 ]; then
    why="checkpoint written after a signal${scdino_signal:+ ($scdino_signal)}"
  elif [ -n "$scdino_signal" ] && [ "$rc" -ne 0 ] && [ "$rc" -ne 4 ]; then
    why="the step ended with code $rc after a signal ($scdino_signal) reached the whole job; resuming from the last checkpoint"
  else
    [ "$rc" -eq 0 ] || exit "$rc"
    return 0
  fi
  if [ "$restarts" -ge "$max" ]; then
    echo "scdino: $why, but job $SLURM_JOB_ID was already requeued $restarts times (SCDINO_MAX_REQUEUES=$max);" \
         "not requeueing. Submit it again to resume."
    exit 75
  fi
  echo "scdino: $why; requeueing job $SLURM_JOB_ID (restart $((restarts + 1)) of at most $max)"
  scontrol requeue "$SLURM_JOB_ID"
  exit 0
}
