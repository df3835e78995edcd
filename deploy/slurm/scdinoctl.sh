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
#   deploy/slurm/scdinoctl.sh --image IMAGE.sqsh [--mount DIR]... SCDINOCTL_ARGS...
#
# e.g. deploy/slurm/scdinoctl.sh --image /shared/images/scdino-cuda.sqsh
#        --mount /shared/scdino watch --job 1234_0 --run-dir /shared/scdino/runs/cluster
# Each --mount DIR is mounted at the same path (the run directory).
# The exit code is scdinoctl's (docs/control.md); 2 where this node lacks
# enroot or squeue, or the image is not a file, said.
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
refuse() { echo "scdinoctl.sh: $*" >&2; exit 2; }

image="" mounts=()
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --image) [ $# -ge 2 ] || refuse "--image needs an Enroot image file (.sqsh)"; image=$2; shift 2 ;;
    --mount) [ $# -ge 2 ] || refuse "--mount needs a folder"; mounts+=(--mount "$2:$2"); shift 2 ;;
    *) break ;;
  esac
done
[ -n "$image" ] || refuse "--image IMAGE.sqsh is needed (--help)"
[ -f "$image" ] || refuse "--image $image: no such file (an Enroot image: scripts/build-image.sh --cuda --enroot)"
[ $# -gt 0 ] || refuse "no scdinoctl command given (e.g. watch --job JOBID --run-dir DIR)"
command -v enroot >/dev/null || refuse "enroot is not on this node's PATH: run scdinoctl from a host build, or as a job step (docs/control.md#from-the-login-node)"
squeue=$(command -v squeue) || refuse "squeue is not on this node's PATH: run this where Slurm's client is"

relay=$(mktemp -d "${TMPDIR:-/tmp}/scdino-squeue.XXXXXX")
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
# name and renamed, so neither side reads half a file.
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
  [ "$tries" -le 600 ] || { echo "squeue: the login node's relay did not answer in 60 s" >&2; exit 1; }
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

enroot start --env NVIDIA_VISIBLE_DEVICES=void --env SCDINO_SQUEUE="$relay/squeue" --mount "$relay:$relay" \
  "${mounts[@]}" "$image" scdinoctl "$@" && rc=0 || rc=$?
exit "$rc"
