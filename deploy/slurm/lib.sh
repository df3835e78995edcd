# Shared by deploy/slurm/*.sbatch: run a job step so that the job survives a
# job-wide SIGTERM, and requeue after a stop by a signal.
#
# A job-wide SIGTERM (`scancel --signal=TERM --full`, a preemption that
# signals the batch step) reaches the batch shell as well as the steps.
# Untrapped, it kills this shell, so nothing requeues the job. The trap only
# records the signal; the shell waits for the step and requeues.

scdino_signal="" scdino_signals=0
trap 'scdino_signal=TERM scdino_signals=$((scdino_signals + 1))' TERM
trap 'scdino_signal=USR1 scdino_signals=$((scdino_signals + 1))' USR1

# scdino_wait PID: waits for a background step through signals delivered to
# this shell and returns the step's own exit code, whatever the order of the
# signal, the trap and the step's end.
scdino_wait() {
  local pid=$1 rc seen
  while :; do
    seen=$scdino_signals
    wait "$pid"
    rc=$?
    # No trap ran: wait returned because the step ended, with its code.
    [ "$seen" = "$scdino_signals" ] && return "$rc"
    # A trap ran: wait may have returned early (128 + the signal), or with
    # the step's code just before the trap. Waiting again tells: bash keeps
    # the code of a background job that has ended, even one it has already
    # reaped or reported, so the next wait returns it at once (or when the
    # step ends). Asking the kernel (kill -0) for the code instead lost that
    # of a step that ended between the two; here it only says whether to
    # look again before that wait.
    #
    # Meanwhile, once a second: Slurm may have found a node of the job down
    # and requeued it (the signal was its SIGTERM). This shell then has
    # KillWait seconds left, too few to wait for a step whose ranks wait on
    # the lost node, and only now can the job be changed. (Requeued with
    # every node up, a preemption: the step is waited for, as it
    # checkpoints.)
    while scdino_step_runs "$pid"; do
      if scdino_requeued_by_slurm && [ -n "$(scdino_lost_nodes)" ]; then
        scdino_fit_requeued_job
        exit 0
      fi
      sleep 1
    done
  done
}
# scdino_step_runs PID: the step's process is there and not a zombie.
scdino_step_runs() {
  kill -0 "$1" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]
}

# Slurm 22.05 and later no longer hand the job's --cpus-per-task to srun.
[ -z "${SLURM_CPUS_PER_TASK:-}" ] || export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK

# scdino_tasks_per_node: the most tasks this job runs on one node
# (SLURM_NTASKS_PER_NODE, else the largest count of SLURM_TASKS_PER_NODE,
# e.g. "4(x2),3"); empty when Slurm says neither.
scdino_tasks_per_node() {
  local list=${SLURM_NTASKS_PER_NODE:-${SLURM_TASKS_PER_NODE:-}} most=0 n
  IFS=, read -r -a counts <<<"$list"
  for n in "${counts[@]}"; do
    n=${n%%(*}
    [ "$n" -gt "$most" ] 2>/dev/null && most=$n
  done
  [ "$most" -gt 0 ] && echo "$most"
  return 0
}

# scdino_check_geometry: the job's tasks as Slurm laid them out, against
# what was asked and what the steps need; exits 2 naming the counts when
# the scripts cannot run it as asked, rather than on fewer tasks or shared
# GPUs: a task count other than --ntasks-per-node x nodes (a directive of
# the script's own once made a two-node request one task), and a node with
# more tasks than the GPUs a job with GPUs has there. A job without GPUs on
# a container's node also gets NVIDIA_VISIBLE_DEVICES=void (Enroot's NVIDIA
# hook then leaves the container alone: a CPU node has no
# nvidia-container-cli, and the GPU image asks for every GPU).
#
# A restarted job (SLURM_RESTART_COUNT > 0) is never refused: its task
# count is the one scdino_fit_requeued_job left (per node x the nodes left
# when a node was lost), and Slurm may have given it more nodes than that
# (the node came back first). Its steps then run --ntasks-per-node tasks on
# every node Slurm gave (scdino_geometry) when each node has the CPUs (and
# GPUs) for them, else the tasks Slurm laid out; the trainer resumes on
# either world size (scdino.elastic_resume).
scdino_geometry=()
scdino_check_geometry() {
  local nodes=${SLURM_JOB_NUM_NODES:-1} ntasks=${SLURM_NTASKS:-1} asked=${SLURM_NTASKS_PER_NODE:-} per_node
  if [ -n "$asked" ] && [ "$asked" -gt 0 ] 2>/dev/null && [ "$ntasks" -ne $((asked * nodes)) ]; then
    if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] 2>/dev/null; then
      local cpus_needed=$((asked * ${SLURM_CPUS_PER_TASK:-1})) gpus=${SLURM_GPUS_ON_NODE:-0}
      if [ "${SLURM_CPUS_ON_NODE:-0}" -ge "$cpus_needed" ] && { [ "$gpus" = 0 ] || [ "$gpus" -ge "$asked" ]; } 2>/dev/null; then
        scdino_geometry=(--nodes="$nodes" --ntasks=$((asked * nodes)) --ntasks-per-node="$asked")
        echo "scdino: job $SLURM_JOB_ID restarted on $nodes node(s) with $ntasks task(s) (the count it was requeued" \
             "with); each node has the CPUs${SLURM_GPUS_ON_NODE:+ and GPUs} for $asked: running $asked per node," \
             "$((asked * nodes)) in all, as asked"
      else
        echo "scdino: job $SLURM_JOB_ID restarted on $nodes node(s) with $ntasks task(s) (the count it was requeued" \
             "with; SLURM_TASKS_PER_NODE=${SLURM_TASKS_PER_NODE:-?}): a node has the CPUs or GPUs for fewer than" \
             "$asked, so the steps run the $ntasks task(s) Slurm laid out"
      fi
    else
      echo "scdino: job $SLURM_JOB_ID asked for $asked task(s) per node on $nodes node(s) ($((asked * nodes)) in all)" \
           "but has $ntasks (SLURM_NTASKS=$ntasks, SLURM_TASKS_PER_NODE=${SLURM_TASKS_PER_NODE:-?}): another --ntasks" \
           "(a directive, an environment variable) overrides the geometry; submit with --nodes and" \
           "--ntasks-per-node alone, or a matching --ntasks" >&2
      exit 2
    fi
  fi
  [ ${#scdino_geometry[@]} -gt 0 ] && per_node=$asked || per_node=$(scdino_tasks_per_node)
  if [ "${SLURM_GPUS_ON_NODE:-0}" -gt 0 ] 2>/dev/null && [ "${per_node:-1}" -gt "$SLURM_GPUS_ON_NODE" ] &&
     [ -z "${SLURM_GPUS_PER_TASK:-}" ] && [ -z "${SCDINO_TRAIN_STEP:-}" ]; then
    echo "scdino: job $SLURM_JOB_ID runs $per_node task(s) on a node with $SLURM_GPUS_ON_NODE GPU(s)" \
         "(SLURM_TASKS_PER_NODE=${SLURM_TASKS_PER_NODE:-?}): scdino runs one task per GPU; ask for" \
         "--gpus-per-task=1, or --gpus-per-node equal to --ntasks-per-node" >&2
    exit 2
  fi
  if [ -n "${SCDINO_CONTAINER:-}" ] && [ "${SLURM_GPUS_ON_NODE:-0}" = 0 ] && [ -z "${SLURM_JOB_GPUS:-}" ]; then
    export NVIDIA_VISIBLE_DEVICES=void
  fi
}

# scdino_step CMD...: runs `srun CMD...` and returns its exit code. A task
# that fails ends the step (a rank left alone would wait for its peers). In a
# job with GPUs and no --gpus-per-task of its own, each task is bound to one
# GPU of its node (scdino_check_geometry refused nodes with fewer).
scdino_step() {
  local gpus=()
  if [ "${SLURM_GPUS_ON_NODE:-0}" -gt 0 ] 2>/dev/null && [ -z "${SLURM_GPUS_PER_TASK:-}" ]; then
    gpus=(--gpus-per-task=1)
  fi
  srun --kill-on-bad-exit=1 "${gpus[@]}" "${scdino_geometry[@]}" "$@" &
  scdino_wait $!
}

# scdino_requeue_or_exit RC: exit code 75 means stopped by a signal with the
# progress saved, 9 that a rank or its node was lost (the last checkpoint is
# intact): requeue the job (at most SCDINO_MAX_REQUEUES times, 20 by
# default, counted by Slurm's SLURM_RESTART_COUNT) and end this run of it.
# A step that ended otherwise after this shell got a signal is requeued too:
# a job-wide SIGTERM also reaches srun, which then kills its tasks at once
# (srun's own handling of SIGTERM), so they had no time to checkpoint; the
# job resumes from the last checkpoint, exactly as it would have continued
# from there (scdino.checkpoint_every_minutes bounds what is redone). 0 (done),
# 2 (bad input), 4 (stopped through the control API), 5 (training diverged:
# it would diverge again), 6 (a preflight check failed: the same nodes
# would fail it again), 7 (did not learn) and 8 (the disk is full: it would
# fail again) are never requeued, signal or not. Any other code ends the
# job with it; 0 returns.
#
# A lost node: Slurm requeues the job itself once it finds the node down
# (SlurmdTimeout), keeping its task count (per node x the nodes it had),
# and this shell then has KillWait seconds: scdino_wait notices and fits the
# job (scdino_fit_requeued_job). The ranks may notice first (exit 9,
# scdino.distributed_timeout_s): then this shell waits for Slurm's verdict
# (SlurmdTimeout + 60 s at most, SCDINO_NODE_WAIT_S) rather than requeue at
# once, because a running job's task count cannot be changed, and a job this
# shell requeues is only pending once this shell has ended. No verdict in
# time (the nodes answer: a rank was lost, not a node) and the job is
# requeued as it is.
scdino_requeue_or_exit() {
  local rc=$1 max=${SCDINO_MAX_REQUEUES:-20} restarts=${SLURM_RESTART_COUNT:-0} why
  if [ "$rc" -eq 75 ]; then
    why="checkpoint written after a signal${scdino_signal:+ ($scdino_signal)}"
  elif [ "$rc" -eq 9 ]; then
    why="a rank or its node was lost (see above); the job resumes from the last checkpoint"
  elif [ -n "$scdino_signal" ] && ! case $rc in 0|2|4|5|6|7|8) true ;; *) false ;; esac; then
    why="the step ended with code $rc after a signal ($scdino_signal) reached the whole job; resuming from the last checkpoint"
  else
    [ "$rc" -eq 0 ] || exit "$rc"
    return 0
  fi
  if ! scdino_requeued_by_slurm && [ "$restarts" -ge "$max" ]; then
    echo "scdino: $why, but job $SLURM_JOB_ID was already requeued $restarts times (SCDINO_MAX_REQUEUES=$max);" \
         "not requeueing. Submit it again to resume."
    exit 75
  fi
  if [ "$rc" -eq 9 ] && ! scdino_requeued_by_slurm; then
    local wait_s=${SCDINO_NODE_WAIT_S:-$(($(scdino_slurmd_timeout) + 60))} t0=$SECONDS
    echo "scdino: $why; waiting up to $wait_s s for Slurm to find whether a node of job $SLURM_JOB_ID is down" \
         "(SlurmdTimeout; SCDINO_NODE_WAIT_S) before requeueing it"
    while ! scdino_requeued_by_slurm && [ $((SECONDS - t0)) -lt "$wait_s" ]; do
      sleep 1
    done
  fi
  if scdino_requeued_by_slurm; then
    echo "scdino: $why"
    scdino_fit_requeued_job
  else
    echo "scdino: $why; requeueing job $SLURM_JOB_ID (restart $((restarts + 1)) of at most $max): it starts" \
         "again on ${SLURM_JOB_NUM_NODES:-1} node(s), as now"
    scontrol requeue "$SLURM_JOB_ID" 2>/dev/null || echo "scdino: job $SLURM_JOB_ID was already requeued by Slurm"
  fi
  exit 0
}

# scdino_job_field NAME: this job's NAME=value from scontrol (empty when
# Slurm no longer knows the job).
scdino_job_field() {
  [ -n "${SLURM_JOB_ID:-}" ] || return 0
  { scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1; } || true
}
# scdino_requeued_by_slurm: Slurm counts a restart this run of the job did
# not start with: the job is pending again (shown COMPLETING while any of
# its processes, this shell among them, still runs).
scdino_requeued_by_slurm() {
  local r
  r=$(scdino_job_field Restarts)
  [ -n "$r" ] && [ "$r" -gt "${SLURM_RESTART_COUNT:-0}" ] 2>/dev/null
}
# scdino_lost_nodes: the job's nodes Slurm has down, not responding,
# draining or failing, comma-separated (empty: none).
scdino_lost_nodes() {
  [ -n "${SLURM_JOB_NODELIST:-}" ] || return 0
  { sinfo -h -N -n "$SLURM_JOB_NODELIST" -o '%N %t' 2>/dev/null |
    awk '$2 ~ /[*~#!%$@^-]$|^(down|drain|drng|fail|maint|boot|pow)/ {print $1}' | sort -u | paste -sd, -; } || true
}
scdino_slurmd_timeout() {
  local t
  t=$(scontrol show config 2>/dev/null | sed -n 's/^SlurmdTimeout *= *\([0-9]*\).*/\1/p') || true
  echo "${t:-300}"
}

# scdino_fit_requeued_job: Slurm requeued the job, keeping the task count of
# its last start (per node x the nodes it had). With some of its nodes down,
# a job asked with --ntasks-per-node gets per node x the nodes left: a job
# asked with --nodes=MIN-MAX then starts again on the nodes left (at least
# MIN); one asked with a fixed --nodes=N still waits for N nodes (Slurm
# keeps its node count). Neither form can be told from inside the job (Slurm
# shows what the job holds until it has ended), and neither needs to be:
# on every node Slurm gives it, the restarted job runs its --ntasks-per-node
# tasks (scdino_check_geometry). Says what it did.
scdino_fit_requeued_job() {
  local id=$SLURM_JOB_ID per_node=${SLURM_NTASKS_PER_NODE:-} nodes=${SLURM_JOB_NUM_NODES:-1} lost n_lost left
  lost=$(scdino_lost_nodes)
  n_lost=$(echo "$lost" | tr ',' '\n' | grep -c .) || true
  if [ "$n_lost" -eq 0 ]; then
    echo "scdino: Slurm requeued job $id; none of its nodes is down now: it starts again on $nodes node(s), as before"
  elif [ -n "$per_node" ] && [ "$nodes" -gt 1 ]; then
    left=$((nodes - n_lost))
    [ "$left" -ge 1 ] || left=1
    if scontrol update JobId="$id" NumTasks=$((per_node * left)); then
      echo "scdino: Slurm requeued job $id with $lost down; its task count is now $((per_node * left))" \
           "($per_node per node on the $left node(s) left): asked with --nodes=MIN-MAX it starts again on the" \
           "nodes left (at least MIN), asked with --nodes=$nodes once $nodes nodes are up; either way it runs" \
           "$per_node task(s) on every node it gets"
    else
      echo "scdino: warning: Slurm requeued job $id with $lost down, but its task count could not be lowered:" \
           "it starts again once $nodes nodes are up"
    fi
  else
    echo "scdino: Slurm requeued job $id with $lost down: it starts again with its ${SLURM_NTASKS:-1} task(s)" \
         "once Slurm can place them"
  fi
}

# Node-local staging of a packed data set (scdino-pack; docs/data.md).
# scdino_stage_setup: sets SCDINO_STAGE_DIR, where each node keeps its copy
# (default: $SLURM_TMPDIR, the site's per-job directory, else $TMPDIR, else
# /tmp, then scdino-stage-$USER; scdino-pack creates it 0700 and refuses one
# that is not the user's own: docs/data.md#trust-model-of-staged-data), and
# for a Pyxis container mounts its parent (SCDINO_CONTAINER_MOUNTS), which
# must exist on every node. Call before scdino_container_args.
scdino_stage_setup() {
  [ "${SCDINO_STAGE:-1}" != 0 ] || return 0
  export SCDINO_STAGE_DIR=${SCDINO_STAGE_DIR:-${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/scdino-stage-${USER:-$(id -un)}}
  if [ -n "${SCDINO_CONTAINER:-}" ] && [ ! -d "$SCDINO_CONTAINER" ]; then
    local parent
    parent=$(dirname "$SCDINO_STAGE_DIR")
    export SCDINO_CONTAINER_MOUNTS="${SCDINO_CONTAINER_MOUNTS:+$SCDINO_CONTAINER_MOUNTS,}$parent:$parent"
  fi
}

# scdino_stage CONFIG PACK SRUN_ARGS...: when the config's data set is a
# packed set, copies it into SCDINO_STAGE_DIR on every node of the job (one
# task per node: `PACK --stage`), verified; a copy verified before (a
# requeued job) is reused. The services then read the node's copy. A node
# whose staging fails (no room, a corrupt shard) reads the shared copy: a
# warning here and in the services' logs. SCDINO_STAGE=0: no staging.
scdino_stage() {
  [ "${SCDINO_STAGE:-1}" != 0 ] || return 0
  local config=$1 pack=$2 t0=$SECONDS rc
  shift 2
  if [ -n "${SCDINO_CONTAINER:-}" ] && [ -d "$SCDINO_CONTAINER" ]; then
    echo "scdino: not staging: an OCI bundle mounts only the paths it was made with (use Pyxis, or a bundle made" \
         "with --mounts holding SCDINO_STAGE_DIR and SCDINO_CONTAINER_MOUNTS unset)"
    return 0
  fi
  srun --ntasks-per-node=1 --ntasks="${SLURM_JOB_NUM_NODES:-1}" --cpus-per-task=1 "$@" \
    "$pack" --config "$config" --threads 1 --stage "$SCDINO_STAGE_DIR" &
  scdino_wait $! && rc=0 || rc=$?
  echo "scdino: staging step took $((SECONDS - t0)) s"
  # A signal during staging (a preemption, the time limit) is the job's: it
  # requeues as a stopped trainer does, and the next staging starts again.
  if [ "$rc" -eq 75 ] || [ -n "$scdino_signal" ]; then
    echo "scdino: staging was stopped by a signal"
    scdino_requeue_or_exit 75
  fi
  if [ "$rc" -ne 0 ]; then
    echo "scdino: warning: staging the data set to $SCDINO_STAGE_DIR failed (exit $rc; see above):" \
         "the nodes without a verified copy read the shared one"
  fi
}

# scdino_config_paths CONFIG IMAGE_ARGS...: every path the config makes a
# service read or write, as `scdino-config paths` lists them
# (ACCESS<TAB>ABSOLUTE_PATH<TAB>KEY): the config is parsed by the project's
# own parser, never by grep. The tool is SCDINO_CONFIG_TOOL, else
# scdino-config on PATH or beside SCDINO_BIN's build tree, else the image's
# own (one task, IMAGE_ARGS: the srun flags that run it in the container).
scdino_config_paths() {
  local config=$1 tool=${SCDINO_CONFIG_TOOL:-}
  shift
  if [ -z "$tool" ]; then
    if command -v scdino-config >/dev/null 2>&1; then
      tool=scdino-config
    elif [ -x "${SCDINO_BIN:-build/services/trainer}/../tools/scdino-config" ]; then
      tool="${SCDINO_BIN:-build/services/trainer}/../tools/scdino-config"
    fi
  fi
  if [ -n "$tool" ]; then
    "$tool" paths "$config"
  else
    srun --ntasks=1 --nodes=1 --kill-on-bad-exit=1 "$@" scdino-config paths "$config"
  fi
}

# scdino_check_paths LISTED: each line ACCESS<TAB>PATH<TAB>KEY; read-only
# paths must be readable, read-write ones are created and must be writable.
scdino_check_paths() {
  local access path key
  while IFS=$'\t' read -r access path key; do
    [ -n "$path" ] || continue
    if [ "$access" = rw ]; then
      mkdir -p "$path" 2>/dev/null && [ -w "$path" ] || {
        echo "scdino: $path ($key) cannot be created or written" >&2; return 2; }
    elif [ -d "$path" ]; then
      [ -r "$path" ] && [ -x "$path" ] || { echo "scdino: $path ($key) is not a readable directory" >&2; return 2; }
    else
      [ -r "$path" ] || { echo "scdino: $path ($key) does not exist or is not readable" >&2; return 2; }
    fi
  done <<<"$1"
}

# scdino_container_args CONFIG [NAME]: fills the array container_args with the srun
# flags that run a step in SCDINO_CONTAINER, and checks what they name. The
# paths come from scdino_config_paths: the config's folder, the data set or
# index CSV, token and TLS files (read-only), the output directory, the
# Prometheus file_sd directory and a statistics file's folder (read-write).
#  - an OCI bundle directory (config.json + rootfs/): Slurm's own
#    --container (oci.conf, runc); its mounts are in the bundle's
#    config.json, and every path must lie in them. Slurm 22.05 runs one task
#    per node this way.
#  - otherwise a Pyxis/Enroot image (a .sqsh file or a registry reference):
#    --container-image; --container-mounts with the working directory and
#    every read-only path mounted `:ro`, the read-write ones writable (each at
#    the same path, parents before what lies inside them), plus
#    SCDINO_CONTAINER_MOUNTS (SRC[:DST[:FLAGS]],...); --container-workdir,
#    --no-container-mount-home and, given NAME, --container-name=NAME: the
#    sequential steps of one job then share one unpacked container (not for
#    concurrent steps: they would race to create it). Pyxis keeps named
#    containers after the job unless its container_scope is job
#    (docs/containers.md).
# Returns 2 with a message naming the path or key on a bad config, a missing
# image, a path to read that is missing or unreadable, one to write that
# cannot be created or written, or a path outside a bundle's mounts.
scdino_container_args() {
  local config=$1 name=${2:-} image=${SCDINO_CONTAINER:?} cfg_dir m src mounts=() access path key listed
  container_args=()
  [ -r "$config" ] || { echo "scdino: config $config is not readable" >&2; return 2; }
  cfg_dir=$(cd "$(dirname "$config")" && pwd)
  config="$cfg_dir/$(basename "$config")"
  local probe=()
  if [ -d "$image" ]; then
    [ -f "$image/config.json" ] && [ -d "$image/rootfs" ] || {
      echo "scdino: SCDINO_CONTAINER=$image is a directory but not an OCI bundle (config.json and rootfs/);" \
           "make one with scripts/build-image.sh --oci-bundle $image" >&2; return 2; }
    local per_node
    per_node=$(scdino_tasks_per_node)
    if [ "${per_node:-1}" -gt 1 ]; then
      echo "scdino: SCDINO_CONTAINER=$image is an OCI bundle: Slurm 22.05's --container runs one task" \
           "per node, this job has $per_node; use Pyxis (--container-image) or --ntasks-per-node=1" >&2
      return 2
    fi
    probe=(--container="$image")
  else
    # Pyxis takes an image that starts with / or . for a file, anything else
    # for a registry reference (Enroot pulls it). A relative file name that
    # exists here is meant as a file: it is made absolute.
    case $image in
      /*|.*) ;;
      *) [ -f "$image" ] && image="./$image" ;;
    esac
    case $image in
      /*|.*)
        [ -f "$image" ] || { echo "scdino: SCDINO_CONTAINER=$image: no such image file (an Enroot .sqsh made by scripts/build-image.sh --sqsh)" >&2; return 2; }
        [ -r "$image" ] || { echo "scdino: SCDINO_CONTAINER=$image is not readable" >&2; return 2; }
        image="$(cd "$(dirname "$image")" && pwd)/$(basename "$image")" ;;
    esac
    probe=(--container-image="$image" --container-mounts="$cfg_dir:$cfg_dir:ro,$PWD:$PWD:ro"
           --container-workdir="$PWD" --no-container-mount-home)
  fi
  listed=$(scdino_config_paths "$config" "${probe[@]}") || {
    echo "scdino: $config: scdino-config paths failed (see above); fix the config before submitting" >&2; return 2; }
  listed=$(printf 'ro\t%s\tthe working directory\n%s\n' "$PWD" "$listed")
  if [ -d "$image" ]; then
    # Every path must be inside a bind mount of the bundle (at the same path).
    local binds b inside
    binds=$(grep -o '"destination": "[^"]*", "type": "bind"' "$image/config.json" | sed 's/"destination": "\([^"]*\)".*/\1/')
    while IFS=$'\t' read -r access path key; do
      [ -n "$path" ] && [ "$key" != "the working directory" ] || continue
      inside=0
      for b in $binds; do
        case $b in /etc/*) continue ;; esac
        case "$path/" in "$b"/*) inside=1 ;; esac
      done
      [ "$inside" = 1 ] || {
        echo "scdino: $path ($key) is outside the mounts of the OCI bundle $image (${binds//$'\n'/ });" \
             "make the bundle with scripts/build-image.sh --oci-bundle $image --mounts <a directory holding it>" >&2
        return 2; }
    done <<<"$listed"
    scdino_check_paths "$listed" || return 2
    container_args=(--container="$image")
    return 0
  fi
  scdino_check_paths "$listed" || return 2
  # One mount per path, parents first (a writable output directory inside a
  # read-only working directory is mounted over it); a path inside one
  # already mounted with the same access needs no mount of its own; the
  # same path asked read-only and read-write is mounted read-write.
  local chosen=() c c_access c_path skip
  while IFS=$'\t' read -r access path; do
    skip=0
    for c in "${chosen[@]}"; do
      c_access=${c%%$'\t'*}; c_path=${c#*$'\t'}
      if [ "$c_path" = "$path" ] || { [ "$c_access" = "$access" ] && case "$path/" in "$c_path"/*) true ;; *) false ;; esac; }; then
        skip=1
      fi
    done
    [ "$skip" = 1 ] || chosen+=("$access"$'\t'"$path")
  done < <(printf '%s\n' "$listed" | awk -F'\t' 'NF >= 2 {print length($2) "\t" ($1 == "rw" ? 0 : 1) "\t" $1 "\t" $2}' |
           sort -t$'\t' -k1,1n -k2,2n | cut -f3,4)
  for c in "${chosen[@]}"; do
    c_access=${c%%$'\t'*}; c_path=${c#*$'\t'}
    if [ "$c_access" = ro ]; then mounts+=("$c_path:$c_path:ro"); else mounts+=("$c_path:$c_path"); fi
  done
  IFS=, read -r -a extra <<<"${SCDINO_CONTAINER_MOUNTS:-}"
  for m in "${extra[@]}"; do
    [ -n "$m" ] || continue
    src=${m%%:*}
    [ -e "$src" ] && [ -r "$src" ] || {
      echo "scdino: SCDINO_CONTAINER_MOUNTS names $src, which does not exist or is not readable" >&2; return 2; }
    mounts+=("$m")
  done
  container_args=(--container-image="$image" --container-mounts="$(IFS=,; echo "${mounts[*]}")"
                  --container-workdir="$PWD" --no-container-mount-home)
  # The image's own NVIDIA_VISIBLE_DEVICES would win over the job's.
  [ -z "${NVIDIA_VISIBLE_DEVICES:-}" ] || container_args+=(--container-env=NVIDIA_VISIBLE_DEVICES)
  [ -z "$name" ] || container_args+=(--container-name="$name")
}
