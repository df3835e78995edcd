#!/usr/bin/env bash
# The image's scdinoctl on this node (a login node with enroot), with no job
# of its own and no GPU, answered by this node's Slurm client: the image
# has none, so without it `watch --job` could not say whether a run is
# still queued. This script starts a relay: scdinoctl in the image asks
# `squeue` through SCDINO_SQUEUE, a small script in a folder mounted into
# the container, which hands the question to this script and prints the
# answer of the node's own squeue. So the image's watch waits as long as
# the job is queued, follows it through its requeues and says how it ended,
# as a host build's does.
#
#   deploy/slurm/scdinoctl.sh --image IMAGE [--mount DIR]... SCDINOCTL_ARGS...
#
# e.g. deploy/slurm/scdinoctl.sh --image /shared/images/scdino-cuda.sqsh
#        --mount /shared/scdino watch --job 1234_0 --run-dir /shared/scdino/runs/cluster
# Each --mount DIR is mounted at the same path (the run directory). Where
# scdinoctl runs:
#   - an Enroot image file (.sqsh) on a node with enroot: here, through
#     `enroot start`; the relay's folder is under $TMPDIR (else /tmp);
#   - an OCI bundle folder (Slurm's srun --container; the bundle's own
#     mounts apply) or an image reference (Pyxis's srun --container-image):
#     in a one-task job step with no GPU (srun's input variables, such as
#     SLURM_PARTITION, say where). The relay's folder is then made in the
#     first --mount DIR, which must be on storage the compute nodes share
#     (the run directory is), so the step asks this node's squeue.
# The exit code is scdinoctl's (docs/control.md); 2 where this node lacks
# enroot, srun or squeue, the image is neither a file, a bundle nor a
# reference, or a step has no --mount to hold the relay, said.
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
refuse() { echo "scdinoctl.sh: $*" >&2; exit 2; }

image="" dirs=()
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --image) [ $# -ge 2 ] || refuse "--image needs an Enroot image file (.sqsh), an OCI bundle or an image reference"
             image=$2; shift 2 ;;
    --mount) [ $# -ge 2 ] || refuse "--mount needs a folder"; dirs+=("$2"); shift 2 ;;
    *) break ;;
  esac
done
[ -n "$image" ] || refuse "--image IMAGE is needed (--help)"
[ $# -gt 0 ] || refuse "no scdinoctl command given (e.g. watch --job JOBID --run-dir DIR)"
# Pyxis reads an image that starts with / or . as a file, anything else as
# a registry reference (deploy/slurm/lib.sh does the same).
if [ -d "$image" ]; then
  [ -f "$image/config.json" ] && [ -d "$image/rootfs" ] ||
    refuse "--image $image is a folder but not an OCI bundle (config.json and rootfs/; scripts/build-image.sh --oci-bundle)"
  where=bundle
else
  case $image in
    /*|.*|*.sqsh)
      [ -f "$image" ] || refuse "--image $image: no such file (an Enroot image: scripts/build-image.sh --cuda --enroot)"
      command -v enroot >/dev/null ||
        refuse "enroot is not on this node's PATH: run scdinoctl from a host build, or this script as a job step (docs/control.md#from-the-login-node)"
      where=here ;;
    *) where=reference ;;
  esac
fi
squeue=$(command -v squeue) || refuse "squeue is not on this node's PATH: run this where Slurm's client is"
if [ "$where" = here ]; then
  relay=$(mktemp -d "${TMPDIR:-/tmp}/scdino-squeue.XXXXXX")
else
  command -v srun >/dev/null || refuse "srun is not on this node's PATH: the image $image runs as a job step"
  [ ${#dirs[@]} -gt 0 ] && [ -d "${dirs[0]}" ] ||
    refuse "--image $image runs as a job step: give --mount DIR, a folder the compute nodes share (the run directory), for its squeue relay"
  relay=$(mktemp -d "$(cd "${dirs[0]}" && pwd)/.scdino-squeue.XXXXXX")
fi
answering=""
finish() {
  [ -z "$answering" ] || kill "$answering" 2>/dev/null || true
  rm -rf "$relay"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# In the container: a question is a file of arguments (NAME.req), its answer
# the exit code then the output (NAME.ans), each written under a temporary
# name and renamed, so neither side reads half a file. It waits up to 300 s:
# on NFS, a new file can take a directory cache's time (up to a minute) to
# be seen from the other node.
cat > "$relay/squeue" <<'SH'
#!/bin/sh
# squeue for the image's scdinoctl, answered by the login node's own
# (deploy/slurm/scdinoctl.sh).
dir=$(dirname "$0")
ask=$dir/ask.$$.$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
printf '%s\n' "$@" > "$ask.tmp" && mv "$ask.tmp" "$ask.req"
tries=0
while [ ! -e "$ask.ans" ]; do
  tries=$((tries + 1))
  [ "$tries" -le 3000 ] || { echo "squeue: the login node's relay did not answer in 300 s" >&2; exit 1; }
  sleep 0.1
done
{ read -r code; cat; } < "$ask.ans"
rm -f "$ask.ans"
exit "$code"
SH
chmod +x "$relay/squeue"

# On this node: each question to the node's own squeue.
answer() {
  local req args code out
  while :; do
    for req in "$relay"/*.req; do
      [ -e "$req" ] || continue
      mapfile -t args < "$req"
      rm -f "$req"
      out=$("$squeue" "${args[@]}" 2>&1) && code=0 || code=$?
      printf '%s\n%s\n' "$code" "$out" > "${req%.req}.tmp"
      mv "${req%.req}.tmp" "${req%.req}.ans"
    done
    sleep 0.1
  done
}
answer &
answering=$!

# NVIDIA_VISIBLE_DEVICES=void keeps Enroot's NVIDIA hook off a node
# without GPUs (the GPU image asks for every GPU).
step=(srun --ntasks=1 --cpus-per-task=1 --job-name=scdino-watch)
case $where in
  here)
    mounts=(--mount "$relay:$relay")
    for d in "${dirs[@]}"; do mounts+=(--mount "$d:$d"); done
    enroot start --env NVIDIA_VISIBLE_DEVICES=void --env SCDINO_SQUEUE="$relay/squeue" "${mounts[@]}" \
      "$image" scdinoctl "$@" && rc=0 || rc=$? ;;
  bundle)
    # Set in the command, so that they win over the bundle's own variables
    # (the GPU image's NVIDIA_VISIBLE_DEVICES=all).
    "${step[@]}" --container="$image" env NVIDIA_VISIBLE_DEVICES=void SCDINO_SQUEUE="$relay/squeue" \
      scdinoctl "$@" && rc=0 || rc=$? ;;
  reference)
    binds=""
    for d in "${dirs[@]}"; do binds+="${binds:+,}$d:$d"; done
    NVIDIA_VISIBLE_DEVICES=void SCDINO_SQUEUE="$relay/squeue" "${step[@]}" \
      --container-env=NVIDIA_VISIBLE_DEVICES,SCDINO_SQUEUE --container-image="$image" --container-mounts="$binds" \
      --no-container-mount-home scdinoctl "$@" && rc=0 || rc=$? ;;
esac
exit "$rc"
