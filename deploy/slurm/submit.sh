#!/usr/bin/env bash
# From the login node: check a run's config, then submit its training and
# the evaluation that follows it, one command. Nothing queues before the
# config has passed the image's own `scdino-config check` (or a host
# build's), and a GPU submission to a partition without GPUs is refused.
#
#   deploy/slurm/submit.sh CONFIG.yaml [--nodes N] [--gpus-per-node G] [--partition P] [--time T]
#       [--cpus-per-gpu C] [--image IMAGE] [--set KEY=VALUE]... [--throttle K] [--no-eval] [--dry-run]
#       [--watch]
#
# The geometry is the one a user thinks in: N nodes of G GPUs (default 1
# node, 1 GPU; G 0: a CPU run, one task a node). Each GPU gets a task and
# C CPUs (default: the partition's smallest node's CPUs shared among its G
# GPUs). --time and --partition go to sbatch as they are (without them,
# the partition's defaults). Each channel combination of the config is a
# run of its own: with several, the training is a job array of one task
# each (`scdino-config combinations`; --throttle K runs at most K at once on
# a cluster with fewer GPUs than combinations). The evaluation (1 node, G
# GPUs: the features of every checkpoint, of a random ViT and of the raw
# pixels, then the kNN, the plots and report.html) starts after its
# training succeeded (`aftercorr` for an array, else `afterok`), and Slurm
# ends it at once if that training fails (--kill-on-invalid-dep=yes), never
# leaving it pending. --no-eval: the training alone; --dry-run: check and
# print the sbatch lines, submit nothing. It prints the job ids, the logs,
# the reports and a watch line; --watch then runs that watch here: it
# waits while the training is queued, follows it through its requeues and
# ends with it (Ctrl-C leaves it; the jobs go on), its exit code the
# watch's (docs/control.md: 0 once the training completed).
#
# The services run from --image (default $SCDINO_CONTAINER: an Enroot .sqsh,
# an image reference or an OCI bundle; docs/containers.md), else from the
# host build $SCDINO_BUILD (default build). The config is checked by the
# image's own scdino-config where this node can start the image (`enroot
# start` for a .sqsh, podman or docker for an image reference;
# NVIDIA_VISIBLE_DEVICES=void: no GPU needed), else by a host build's. Exit 2: a bad config or
# option, or what is missing on this node (Slurm's client, a way to check
# the config), said; nothing was submitted.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
say() { echo "scdino-submit: $*"; }
refuse() { echo "scdino-submit: $*" >&2; exit 2; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

config="" nodes=1 gpus=1 partition="" time="" cpus="" image=${SCDINO_CONTAINER:-} throttle="" evaluate=1 dry=0 watch=0
sets=()
need() { [ $# -ge 2 ] && [ -n "$2" ] || refuse "$1 needs a value (--help)"; }
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --nodes) need "$@"; nodes=$2; shift ;;
    --gpus-per-node) need "$@"; gpus=$2; shift ;;
    --partition) need "$@"; partition=$2; shift ;;
    --time) need "$@"; time=$2; shift ;;
    --cpus-per-gpu) need "$@"; cpus=$2; shift ;;
    --image) need "$@"; image=$2; shift ;;
    --set) need "$@"; sets+=(--set "$2"); shift ;;
    --throttle) need "$@"; throttle=$2; shift ;;
    --no-eval) evaluate=0 ;;
    --dry-run) dry=1 ;;
    --watch) watch=1 ;;
    -*) refuse "unknown option '$1' (--help says what it takes)" ;;
    *) [ -z "$config" ] || refuse "one config file, not '$config' and '$1'"; config=$1 ;;
  esac
  shift
done
[ -n "$config" ] || refuse "give the run's config file (--help)"
[ -f "$config" ] || refuse "$config: no such file (the run's YAML config)"
for v in nodes:"$nodes" gpus-per-node:"$gpus" ${cpus:+cpus-per-gpu:"$cpus"} ${throttle:+throttle:"$throttle"}; do
  [[ ${v#*:} =~ ^[0-9]+$ ]] || refuse "--${v%%:*} ${v#*:}: expected a whole number"
done
[ "$nodes" -ge 1 ] || refuse "--nodes $nodes: expected at least 1"
[ -z "$cpus" ] || [ "$cpus" -ge 1 ] || refuse "--cpus-per-gpu $cpus: expected at least 1"
[ -z "$throttle" ] || [ "$throttle" -ge 1 ] || refuse "--throttle $throttle: expected at least 1"
config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")
case $image in
  /*|./*|../*|*.sqsh) [ -e "$image" ] || refuse "--image $image: no such file (an Enroot .sqsh or an OCI bundle; or an image reference such as localhost/scdino:cuda)" ;;
esac

command -v sbatch >/dev/null && command -v sinfo >/dev/null ||
  refuse "no Slurm client on this node (sbatch and sinfo not found): run it on the cluster's login node"

# ---- the config, checked before anything queues ----------------------------
build=${SCDINO_BUILD:-build}
# The image's own checker where the image can be started here (what will
# run is what checks), else a host build's. Mounted: the working directory
# and the config's folder, where its relative and absolute paths lead; the
# data set may not be visible here (then said, and checked where it is).
mounts=("$PWD")
[ "$(dirname "$config")" = "$PWD" ] || mounts+=("$(dirname "$config")")
engine=$(command -v podman || command -v docker || true)
if [ -n "$image" ] && [ -f "$image" ] && command -v enroot >/dev/null; then
  checker=(enroot start --env NVIDIA_VISIBLE_DEVICES=void)
  for m in "${mounts[@]}"; do checker+=(--mount "$m:$m"); done
  checker+=("$image" scdino-config)
elif [ -n "$image" ] && [ ! -e "$image" ] && [ -n "$engine" ]; then
  checker=("$engine" run --rm -e NVIDIA_VISIBLE_DEVICES=void -w "$PWD")
  for m in "${mounts[@]}"; do checker+=(-v "$m:$m:ro"); done
  checker+=("$image" scdino-config)
elif [ -x "$build/services/tools/scdino-config" ]; then
  checker=("$build/services/tools/scdino-config")
elif command -v scdino-config >/dev/null; then
  checker=(scdino-config)
else
  why=", and no --image (or SCDINO_CONTAINER) to run it from"
  if [ -f "$image" ]; then why=", and no enroot to start $image"
  elif [ -e "$image" ]; then why=", and $image is an OCI bundle, which only Slurm starts here"
  elif [ -n "$image" ]; then why=", and no podman or docker to start $image"
  fi
  refuse "cannot check $config before it queues: no scdino-config in $build/services/tools (SCDINO_BUILD) or on PATH$why"
fi
# The check's word on a file of several combinations that one run trains
# one of them is not for a submission that trains them all.
rc=0
checked=$("${checker[@]}" check "$config" "${sets[@]}" 2>&1) || rc=$?
grep -v "combinations are not trained by this run" <<<"$checked" >&2 || true
[ "$rc" = 0 ] || { echo "scdino-submit: $config: refused, nothing submitted" >&2; exit "$rc"; }
mapfile -t combinations < <("${checker[@]}" combinations "$config" "${sets[@]}")
n=${#combinations[@]}
[ "$n" -ge 1 ] || refuse "$config: scdino-config combinations listed none"

# ---- the geometry ----------------------------------------------------------
part=${partition:-$(sinfo -h -o '%P' | sed -n 's/\*$//p' | head -1)}
[ -n "$part" ] || refuse "no --partition, and this cluster has no default partition: $(sinfo -h -o '%P' | sort -u | paste -sd' ' -)"
[ -n "$(sinfo -h -p "$part" -o '%P' 2>/dev/null)" ] ||
  refuse "--partition $part: no such partition (sinfo lists: $(sinfo -h -o '%P' | tr -d '*' | sort -u | paste -sd' ' -))"
if [ "$gpus" -gt 0 ]; then
  gres=$(sinfo -h -p "$part" -o '%G' | sort -u | paste -sd' ' -)
  if ! grep -q 'gpu' <<<"$gres"; then
    with=$(sinfo -h -o '%P %G' | awk '$2 ~ /gpu/ { sub(/\*$/, "", $1); print $1 }' | sort -u | paste -sd' ' -)
    refuse "partition $part has no GPUs (its nodes' GRES: $gres) for --gpus-per-node $gpus: ${with:+partitions with GPUs: $with}${with:-no partition of this cluster has GPUs}; --gpus-per-node 0 runs on CPUs"
  fi
fi
tasks=$(( gpus > 0 ? gpus : 1 ))
if [ -z "$cpus" ]; then
  node_cpus=$(sinfo -h -p "$part" -o '%c' | tr -d '+' | sort -n | head -1)
  cpus=$(( ${node_cpus:-2} / tasks ))
  [ "$cpus" -ge 1 ] || cpus=1
fi
# A node's share, the same for the training's nodes and the evaluation's one.
per_node=(--parsable --ntasks-per-node="$tasks" --cpus-per-task="$cpus" --partition="$part")
[ -z "$time" ] || per_node+=(--time="$time")
[ "$gpus" = 0 ] || per_node+=(--gpus-per-node="$gpus")
array=() name=%j
if [ "$n" -gt 1 ]; then
  array=(--array="0-$((n - 1))${throttle:+%$throttle}")
  name=%A_%a
fi
[ -z "$image" ] || export SCDINO_CONTAINER=$image

train=(sbatch --nodes="$nodes" "${per_node[@]}" "${array[@]}" --job-name=scdino-train --output="$PWD/scdino-train-$name.out"
       "$here/train.sbatch" "$config" "${sets[@]}")
evaluation() {  # evaluation TRAIN_JOB: the evaluation's sbatch line, in eval_cmd
  eval_cmd=(sbatch --nodes=1 "${per_node[@]}" "${array[@]}" --dependency="$([ "$n" -gt 1 ] && echo aftercorr || echo afterok):$1" --kill-on-invalid-dep=yes
             --job-name=scdino-evaluate --output="$PWD/scdino-evaluate-$name.out"
             "$here/evaluate.sbatch" "$config" --all-checkpoints --random-init --raw-pixels "${sets[@]}")
}
if [ "$dry" = 1 ]; then
  say "$config: valid, $n combination(s); would submit (--dry-run):"
  printf '  '; printf '%q ' "${train[@]}"; echo
  if [ "$evaluate" = 1 ]; then evaluation TRAIN_JOB; printf '  '; printf '%q ' "${eval_cmd[@]}"; echo; fi
  exit 0
fi

# ---- submit ----------------------------------------------------------------
train_job=$("${train[@]}") || refuse "sbatch refused the training (above); nothing submitted"
train_job=${train_job%%;*}
say "training: job $train_job$([ "$n" -gt 1 ] && echo " (array 0-$((n - 1))${throttle:+, at most $throttle at once}: one task a combination)"), $nodes node(s) x $tasks task(s), $cpus CPU(s) a task, partition $part"
eval_job=""
if [ "$evaluate" = 1 ]; then
  evaluation "$train_job"
  if ! eval_job=$("${eval_cmd[@]}"); then
    echo "scdino-submit: sbatch refused the evaluation (above); the training runs, job $train_job (scancel $train_job to stop it)" >&2
    exit 1
  fi
  eval_job=${eval_job%%;*}
  say "evaluation: job $eval_job, each after its training succeeded, ended by Slurm if it failed"
fi
for line in "${combinations[@]}"; do
  IFS=$'\t' read -r index run_dir channels <<<"$line"
  task=$([ "$n" -gt 1 ] && echo "_$index" || echo "")
  say "combination $index ($channels): $run_dir"
  say "  logs: $PWD/scdino-train-$train_job$task.out${eval_job:+, $PWD/scdino-evaluate-$eval_job$task.out}"
  [ -z "$eval_job" ] || say "  report: $run_dir/eval/report.html"
done
IFS=$'\t' read -r _ first_dir _ <<<"${combinations[0]}"
top=$([ "$n" -gt 1 ] && dirname "$first_dir" || echo "$first_dir")
pick=()
[ "$n" -le 1 ] || pick=(--combination "$(basename "$first_dir")")
[ "$n" -gt 1 ] && [ -n "$eval_job" ] && say "the combinations compared: $top/report.html"
# The watch follows the first combination's training job where the user is:
# a host build's scdinoctl (or one on PATH) asks Slurm (squeue) and waits
# as long as the job is queued; so does the image's, started by enroot
# through scdinoctl.sh, which answers its squeue with the node's own: here
# when this node has enroot, else as a one-task step on a compute node
# (Pyxis nodes have enroot and Slurm's client). An OCI bundle or an image
# reference runs the image's scdinoctl in a step, its squeue answered by
# this node's through a folder in the run directory (scdinoctl.sh).
first_task=$([ "$n" -gt 1 ] && echo "${train_job}_0" || echo "$train_job")
follow=(watch --job "$first_task" --run-dir "$top" "${pick[@]}")
step=(srun --ntasks=1 --cpus-per-task=1 --job-name=scdino-watch)
if [ -x "$build/services/ctl/scdinoctl" ]; then
  watch_cmd=("$build/services/ctl/scdinoctl" "${follow[@]}")
elif command -v scdinoctl >/dev/null; then
  watch_cmd=(scdinoctl "${follow[@]}")
elif [ -f "$image" ] && command -v enroot >/dev/null; then
  watch_cmd=("$here/scdinoctl.sh" --image "$image" --mount "$top" "${follow[@]}")
elif [ -f "$image" ]; then
  watch_cmd=("${step[@]}" "$here/scdinoctl.sh" --image "$image" --mount "$top" "${follow[@]}")
elif [ -n "$image" ]; then
  watch_cmd=("$here/scdinoctl.sh" --image "$image" --mount "$top" "${follow[@]}")
else
  say "watch: no scdinoctl here (none in $build/services/ctl (SCDINO_BUILD) or on PATH, and no --image): build it (scripts/setup.sh), then scdinoctl ${follow[*]}"
  [ "$watch" = 0 ] || { echo "scdino-submit: --watch: nothing to watch with (above); the jobs run" >&2; exit 1; }
  exit 0
fi
say "watch: ${watch_cmd[*]}"
[ "$watch" = 0 ] || exec "${watch_cmd[@]}"
