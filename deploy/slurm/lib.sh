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

# scdino_step CMD...: runs `srun CMD...` and returns its exit code. A task
# that fails ends the step (a rank left alone would wait for its peers). In a
# job with GPUs, no --gpus-per-task of its own and no more tasks on a node
# than it has GPUs, each task is bound to one GPU.
scdino_step() {
  local gpus=() per_node
  per_node=$(scdino_tasks_per_node)
  if [ "${SLURM_GPUS_ON_NODE:-0}" -gt 0 ] 2>/dev/null && [ -z "${SLURM_GPUS_PER_TASK:-}" ] &&
     [ "${per_node:-1}" -le "${SLURM_GPUS_ON_NODE}" ]; then
    gpus=(--gpus-per-task=1)
  fi
  srun --kill-on-bad-exit=1 "${gpus[@]}" "$@" &
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

# scdino_config_path CONFIG KEY: the value of a path key (output_dir,
# dataset_dir) of a scDINO-layout config, absolute (relative paths are
# relative to the working directory, as the services read them).
scdino_config_path() {
  local v
  # Block (`  key: value`) and flow (`meta: {key: "value", ...}`) style.
  v=$(grep -oE "(^|[{,[:space:]])$2:[[:space:]]*(\"[^\"]*\"|'[^']*'|[^,}#[:space:]]+)" "$1" | head -1 |
      sed -E "s/^.*$2:[[:space:]]*//; s/^[\"']//; s/[\"']\$//")
  [ -n "$v" ] || return 0
  case $v in /*) echo "$v" ;; *) echo "$PWD/$v" ;; esac
}

# scdino_container_args CONFIG [NAME]: fills the array container_args with the srun
# flags that run a step in SCDINO_CONTAINER, and checks what they name:
#  - an OCI bundle directory (config.json + rootfs/): Slurm's own
#    --container (oci.conf, runc); its mounts are in the bundle's
#    config.json, and the config, data set and run directory must lie in
#    them. Slurm 22.05 runs one task per node this way.
#  - otherwise a Pyxis/Enroot image (a .sqsh file or a registry reference):
#    --container-image, --container-mounts covering the working directory, the
#    config's directory, the data set and the run directory (each mounted at
#    the same path) plus SCDINO_CONTAINER_MOUNTS (SRC[:DST[:FLAGS]],...),
#    --container-workdir, --no-container-mount-home and, given NAME,
#    --container-name=NAME: the sequential steps of one job then share one
#    unpacked container (not for concurrent steps: they would race to
#    create it). Pyxis keeps named containers after the job unless its
#    container_scope is job (docs/containers.md).
# Returns 2 with a message naming the path on a missing image, an unreadable
# mount or a config outside the mounts.
scdino_container_args() {
  local config=$1 name=${2:-} image=${SCDINO_CONTAINER:?} cfg_dir data run m src mounts=() seen=" " p
  container_args=()
  [ -r "$config" ] || { echo "scdino: config $config is not readable" >&2; return 2; }
  cfg_dir=$(cd "$(dirname "$config")" && pwd)
  data=$(scdino_config_path "$config" dataset_dir)
  run=$(scdino_config_path "$config" output_dir)
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
    # Every path the step reads or writes must be inside a bind mount of
    # the bundle (mounted at the same path).
    local binds
    binds=$(grep -o '"destination": "[^"]*", "type": "bind"' "$image/config.json" | sed 's/"destination": "\([^"]*\)".*/\1/')
    for p in "$cfg_dir/$(basename "$config")" "$data" "$run"; do
      [ -n "$p" ] || continue
      local inside=0 b
      for b in $binds; do
        case $b in /etc/*) continue ;; esac
        case "$p/" in "$b"/*) inside=1 ;; esac
      done
      [ "$inside" = 1 ] || {
        echo "scdino: $p is outside the mounts of the OCI bundle $image (${binds//$'\n'/ });" \
             "make the bundle with scripts/build-image.sh --oci-bundle $image --mounts <a directory holding it>" >&2
        return 2; }
    done
    container_args=(--container="$image")
    return 0
  fi
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
  [ -z "$run" ] || mkdir -p "$run" || { echo "scdino: cannot create the run directory $run" >&2; return 2; }
  for src in "$PWD" "$cfg_dir" "$data" "$run"; do
    [ -n "$src" ] || continue
    [ -d "$src" ] && [ -r "$src" ] && [ -x "$src" ] || {
      echo "scdino: $src (working directory, config directory, data set or run directory) is not a readable directory to mount into the container" >&2
      return 2; }
    # A directory inside one already mounted needs no mount of its own.
    local inside=0 s
    for s in $seen; do case "$src/" in "$s"/*) inside=1 ;; esac; done
    [ "$inside" = 1 ] && continue
    seen+="$src "
    mounts+=("$src:$src")
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
  [ -z "$name" ] || container_args+=(--container-name="$name")
}
