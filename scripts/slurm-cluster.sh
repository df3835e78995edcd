#!/usr/bin/env bash
# A Slurm cluster of several compute nodes on this one machine: the test
# harness is a cluster, not a node (docs/distributed.md#a-cluster-on-one-machine).
#
#   bash scripts/slurm-cluster.sh start [--nodes N] [--gpus-per-node G] [--cpus-per-node C] [--bandwidth RATE]
#   bash scripts/slurm-cluster.sh stop
#   bash scripts/slurm-cluster.sh status
#   bash scripts/slurm-cluster.sh env            # export SLURM_CONF=... PATH=... for this cluster's commands
#   bash scripts/slurm-cluster.sh shape RATE     # every node's link: tc tbf at RATE (e.g. 10gbit, 1gbit), or off
#   bash scripts/slurm-cluster.sh lose NODE      # the node fails: its slurmd and tasks killed, its link down
#   bash scripts/slurm-cluster.sh restore NODE   # back: link up, slurmd started, the node resumed
#   bash scripts/slurm-cluster.sh exec NODE CMD... # a command on a node (its network, host name and /tmp)
#
# Each compute node (node1 .. nodeN, default 2; 4 GPUs and 48 CPUs each, so
# that every documented command line fits as typed, e.g. 5 tasks x 8 CPUs on
# one node, though all nodes share this machine's cores) is a Linux network namespace
# on the bridge scdino-br0, with an address in 198.18.0.0/15 (RFC 2544's
# benchmark range; no default route, so nothing leaves the machine), its own
# host name (a UTS namespace), its own /tmp (a mount namespace: node-local
# disk, where the batch scripts stage data), its own slurmd and
# node_exporter, and GPUs as Slurm GRES on stand-in device files (character
# devices 195:N, as NVIDIA's are), so that Slurm itself sets
# CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS and SLURM_JOB_GPUS for --gpus-per-task
# and --gpus-per-node. Everything else, the project and its run directories
# among it, is shared by all nodes, as a parallel file system is. The head
# node is this machine: slurmctld (port 6917, beside the single-node test
# Slurm of scripts/slurm-local.sh on 6817), reached at 198.18.0.1 (also
# named scdino-head). Node names resolve everywhere through /etc/hosts (a block
# this script writes and removes). Slurm's Prolog/Epilog write each node's
# slurm_job_node_info textfile (monitoring/exporters/slurm-job-node.sh).
#
# Idempotent: start again and what runs is left running (a changed --nodes,
# --gpus-per-node or --cpus-per-node restarts the cluster). Needs root.
# Debian's slurmd runs in the namespaces when entered with nsenter, not
# `ip netns exec`, which remounts /sys and hides the cgroup tree slurmd reads.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
state=${SCDINO_CLUSTER_STATE:-/var/tmp/scdino-cluster}
conf="$state/etc/slurm.conf"
bridge=scdino-br0
head_addr=198.18.0.1
net_prefix=198.18.0

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
say() { echo "scdino-cluster: $*" >&2; }
die() { echo "scdino-cluster: $*" >&2; exit 1; }

node_names() { local n; n=$(cat "$state/nodes.count" 2>/dev/null || echo 0); for i in $(seq 1 "$n"); do echo "node$i"; done; }
node_addr() { echo "$net_prefix.$((10 + ${1#node}))"; }
# in_node NODE CMD...: CMD in the node's network, UTS and mount namespaces.
in_node() {
  local n=$1
  shift
  nsenter --net="/run/netns/scdino-$n" --uts="$state/ns/$n.uts" --mount="$state/ns/$n.mnt" "$@"
}

export SLURM_CONF="$conf"

# alive PIDFILE WORD: the process of PIDFILE runs and its command line has
# WORD (pids wrap around: a bare kill -0 can find another process).
alive() {
  [ -s "$1" ] || return 1
  local pid
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$2"
}

cmd_env() {
  echo "export SLURM_CONF=$conf"
  echo "export PATH=$state/bin:\$PATH"
}

# The stand-in nvidia-smi: the query scdino-preflight makes (ECC errors),
# answered with 0 for each GPU this task was given.
write_nvidia_smi() {
  mkdir -p "$state/bin"
  cat > "$state/bin/nvidia-smi" <<'SH'
#!/bin/sh
# Stand-in for NVIDIA's nvidia-smi on the test cluster's GRES GPUs
# (scripts/slurm-cluster.sh): answers --query-gpu=...ecc... with 0 per GPU
# of CUDA_VISIBLE_DEVICES, and -L with one line per GPU.
gpus=${CUDA_VISIBLE_DEVICES:-}
[ -n "$gpus" ] || { echo "No devices were found" >&2; exit 6; }
case " $* " in
  *" -L "*) i=0; for g in $(echo "$gpus" | tr ',' ' '); do echo "GPU $i: scdino stand-in GPU (UUID: GPU-standin-$g)"; i=$((i + 1)); done ;;
  *) for g in $(echo "$gpus" | tr ',' ' '); do echo 0; done ;;
esac
SH
  chmod 0755 "$state/bin/nvidia-smi"
  # Prolog/Epilog take no arguments: a wrapper each.
  for mode in prolog epilog; do
    cat > "$state/bin/$mode" <<SH
#!/bin/sh
exec bash "$src/monitoring/exporters/slurm-job-node.sh" --textfile-dir "$state/nodes/\$SLURMD_NODENAME/textfile" $mode
SH
    chmod 0755 "$state/bin/$mode"
  done
}

write_hosts() {  # N: the node names into /etc/hosts, between markers
  local n=$1 block i tmp
  block="# scdino-cluster begin"$'\n'"$head_addr scdino-head"
  for i in $(seq 1 "$n"); do block+=$'\n'"$(node_addr "node$i") node$i"; done
  block+=$'\n'"# scdino-cluster end"
  tmp=$(sed '/^# scdino-cluster begin$/,/^# scdino-cluster end$/d' /etc/hosts)
  # In place: /etc/hosts may be a bind mount, which a rename would not replace.
  printf '%s\n%s\n' "$tmp" "$block" > /etc/hosts
}

write_conf() {  # N G C
  local n=$1 g=$2 c=$3 i mem
  mem=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 / 2 ))
  mkdir -p "$state/etc" "$state/ctld"
  {
    echo "# Written by scripts/slurm-cluster.sh: $n nodes, $g GPUs and $c CPUs each (all on one machine)"
    cat <<CONF
ClusterName=scdino-cluster
SlurmctldHost=$(hostname -s)($head_addr)
SlurmctldPort=6917
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
# A requeued job starts within a second of its hold (as in slurm-local.sh).
SchedulerParameters=bf_interval=1,sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/nodes/%n/spool
SlurmdPidFile=$state/nodes/%n/slurmd.pid
SlurmdLogFile=$state/nodes/%n/slurmd.log
SlurmctldPidFile=$state/slurmctld.pid
SlurmctldLogFile=$state/slurmctld.log
Prolog=$state/bin/prolog
Epilog=$state/bin/epilog
ReturnToService=2
# Nodes declare more CPUs than this machine has: every node is the same
# two cores, and a job of 4 tasks a node with 2 CPUs each must still fit.
SlurmdParameters=config_overrides
SlurmdTimeout=15
MessageTimeout=10
InactiveLimit=0
MpiDefault=none
JobRequeue=1
KillWait=30
CONF
    for i in $(seq 1 "$n"); do
      echo "NodeName=node$i NodeAddr=$(node_addr "node$i") CPUs=$c RealMemory=$mem Gres=gpu:$g State=UNKNOWN"
    done
    echo "PartitionName=cluster Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP"
  } > "$conf.new"
  {
    for i in $(seq 1 "$n"); do
      [ "$g" -gt 0 ] && echo "NodeName=node$i Name=gpu File=$state/nodes/node$i/dev/nvidia[0-$((g - 1))]"
    done
    true
  } > "$state/etc/gres.conf"
  # Slurm's own containers (srun --container=OCI_BUNDLE, one task per node)
  # through Debian's runc, as in slurm-local.sh: the README's cluster quick
  # start runs the CPU image's bundle this way (tests/deploy/quickstart_test.sh).
  # A container shares its node's network and host name.
  cat > "$state/etc/oci.conf" <<CONF
RunTimeQuery="runc --root=$state/runc state %n.%u.%j.%s.%t"
RunTimeKill="runc --root=$state/runc kill -a %n.%u.%j.%s.%t SIGTERM"
RunTimeDelete="runc --root=$state/runc delete --force %n.%u.%j.%s.%t"
RunTimeRun="runc --root=$state/runc run %n.%u.%j.%s.%t -b %b"
CONF
  mv "$conf.new" "$conf"
}

node_up() {  # NODE G
  local n=$1 g=$2 addr d
  addr=$(node_addr "$n")
  d="$state/nodes/$n"
  mkdir -p "$d"/{spool,tmp,dev,textfile} "$state/ns"
  chmod 1777 "$d/tmp"
  for k in $(seq 0 $((g - 1))); do
    [ -c "$d/dev/nvidia$k" ] || mknod -m 0666 "$d/dev/nvidia$k" c 195 "$k"
  done
  # The network: a veth pair, the node's end (eth0) in its namespace.
  ip netns list | grep -qw "scdino-$n" || ip netns add "scdino-$n"
  if ! ip link show "scdino-$n" >/dev/null 2>&1; then
    ip link add "scdino-$n" type veth peer name "scdino-$n-p"
    ip link set "scdino-$n-p" netns "scdino-$n"
    ip -n "scdino-$n" link set "scdino-$n-p" name eth0
    ip link set "scdino-$n" master "$bridge"
  fi
  ip link set "scdino-$n" up
  ip -n "scdino-$n" addr replace "$addr/24" dev eth0
  ip -n "scdino-$n" link set eth0 up
  ip -n "scdino-$n" link set lo up
  # The host name and the node-local /tmp: namespaces kept by bind mounts
  # on files in a private mount of $state/ns. The mount namespace is a
  # slave of the machine's: mounts made later (a test's small file system)
  # reach every node, the node's /tmp stays its own.
  if ! mountpoint -q "$state/ns"; then
    mount --bind "$state/ns" "$state/ns"
    mount --make-private "$state/ns"
  fi
  if ! mountpoint -q "$state/ns/$n.uts" 2>/dev/null; then
    touch "$state/ns/$n.uts"
    unshare --uts="$state/ns/$n.uts" hostname "$n"
  fi
  # A checkout under /tmp (CI may clone anywhere) would be hidden by the
  # node's own /tmp, and Slurm's prolog (a script of the checkout), the
  # binaries and the run directories with it: those paths are bound into
  # the node's /tmp at the same place, in the node's namespace alone.
  local p
  if ! mountpoint -q "$state/ns/$n.mnt" 2>/dev/null; then
    touch "$state/ns/$n.mnt"
    # shellcheck disable=SC2016,SC2046
    unshare --mount="$state/ns/$n.mnt" --propagation slave sh -c '
      d=$1; shift
      for p in "$@"; do mkdir -p "$d/tmp/${p#/tmp/}" && mount --rbind "$p" "$d/tmp/${p#/tmp/}" || exit 1; done
      mount --rbind "$d/tmp" /tmp' sh "$d" $(tmp_paths_to_share)
  fi
  for p in $(tmp_paths_to_share); do
    [ "$(in_node "$n" stat -c %d:%i "$p" 2>/dev/null)" = "$(stat -c %d:%i "$p")" ] ||
      die "$n does not see $p (this machine's) under its own /tmp: start the cluster from a checkout outside /tmp"
  done
  if ! alive "$d/slurmd.pid" "slurmd -f $conf -N $n"; then
    in_node "$n" /usr/sbin/slurmd -f "$conf" -N "$n"
  fi
  if ! alive "$d/node_exporter.pid" "$addr:9100"; then
    # As a compute node's administrator starts it (its pid file and log in $d).
    in_node "$n" bash "$src/scripts/compute-node-exporters.sh" --process --listen "$addr:9100" \
      --textfile-dir "$d/textfile" --run-dir "$d" >/dev/null || die "$n: node_exporter did not start (above)"
  fi
}

# The paths under /tmp every node must see as this machine does: the
# checkout's parent (the checkout, a build beside or in it, ../shared), or
# the checkout and ../shared when it lies in /tmp itself; and
# $SCDINO_CLUSTER_SHARE (paths separated by colons). Nothing outside /tmp:
# nodes share the rest of the file system.
tmp_paths_to_share() {
  local parent p
  parent=$(dirname "$src")
  {
    if [ "$parent" = /tmp ]; then
      echo "$src"
      [ -d /tmp/shared ] && echo /tmp/shared
    else
      echo "$parent"
    fi
    tr ':' '\n' <<<"${SCDINO_CLUSTER_SHARE:-}"
  } | while read -r p; do
    [ -n "$p" ] || continue
    p=$(realpath -m "$p")
    case $p in /tmp/?*) echo "$p" ;; esac
  done | sort -u
}

cmd_stop() {
  local n
  if alive "$state/slurmctld.pid" "slurmctld -f $conf"; then kill "$(cat "$state/slurmctld.pid")" 2>/dev/null || true; fi
  for n in $(node_names); do
    ip netns pids "scdino-$n" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip link del "scdino-$n" 2>/dev/null || true
    ip netns del "scdino-$n" 2>/dev/null || true
    umount "$state/ns/$n.uts" "$state/ns/$n.mnt" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  if [ -f /etc/hosts ] && grep -q '^# scdino-cluster begin$' /etc/hosts; then
    local tmp
    tmp=$(sed '/^# scdino-cluster begin$/,/^# scdino-cluster end$/d' /etc/hosts)
    printf '%s\n' "$tmp" > /etc/hosts
  fi
  for _ in $(seq 1 20); do
    alive "$state/slurmctld.pid" "slurmctld -f $conf" || break
    sleep 0.5
  done
  rm -f "$state/nodes.count"
  say "stopped"
}

cluster_up() {  # -> 0 when every node is idle/mixed/allocated
  local want have
  want=$(cat "$state/nodes.count" 2>/dev/null || echo 0)
  have=$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -cE ' (idle|mixed|allocated)' || true)
  [ "$want" -gt 0 ] && [ "$have" -ge "$want" ]
}

cmd_start() {
  local n=2 g=4 c=48 bw=""
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) n=$2 ;;
      --gpus-per-node) g=$2 ;;
      --cpus-per-node) c=$2 ;;
      --bandwidth) bw=$2 ;;
      *) usage ;;
    esac
    shift 2
  done
  [ "$(id -u)" -eq 0 ] || die "needs root (network and mount namespaces, device files, slurmd)"
  [ "$n" -ge 1 ] && [ "$n" -le 200 ] 2>/dev/null || die "--nodes $n: expected 1 to 200"
  [ "$g" -ge 0 ] && [ "$g" -le 16 ] 2>/dev/null || die "--gpus-per-node $g: expected 0 to 16"
  [ "$c" -ge 1 ] 2>/dev/null || die "--cpus-per-node $c: expected at least 1"
  bash "$src/scripts/slurm-local.sh" install
  local shape="$n $g $c"
  if [ "$(cat "$state/shape" 2>/dev/null)" != "$shape" ] && [ -f "$state/nodes.count" ]; then
    say "the cluster's shape changed ($(cat "$state/shape") -> $shape): restarting it"
    cmd_stop
  fi
  mkdir -p "$state"
  if [ -f "$state/nodes.count" ] && cluster_up; then
    # Up from an older checkout's configuration: its daemons read this one.
    local before
    before=$(cat "$conf")
    write_conf "$n" "$g" "$c"
    [ "$before" = "$(cat "$conf")" ] || scontrol reconfigure
    [ -z "$bw" ] || cmd_shape "$bw"
    return 0
  fi
  echo "$n" > "$state/nodes.count"
  echo "$shape" > "$state/shape"
  write_nvidia_smi
  write_conf "$n" "$g" "$c"
  write_hosts "$n"
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
  fi
  ip addr replace "$head_addr/24" dev "$bridge"
  ip link set "$bridge" up
  local i
  for i in $(seq 1 "$n"); do node_up "node$i" "$g"; done
  if ! alive "$state/slurmctld.pid" "slurmctld -f $conf"; then
    /usr/sbin/slurmctld -f "$conf"
  fi
  for _ in $(seq 1 90); do
    if cluster_up; then
      [ -z "$bw" ] || cmd_shape "$bw"
      say "up: $n nodes (node1..node$n, $net_prefix.11..), $g GPUs and $c CPUs each; SLURM_CONF=$conf"
      return 0
    fi
    scontrol update nodename="node[1-$n]" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  sinfo -N >&2 || true
  die "the cluster did not come up within 90 s; see $state/slurmctld.log and $state/nodes/*/slurmd.log"
}

cmd_status() {
  [ -f "$state/nodes.count" ] || { echo "scdino-cluster: not started"; return 1; }
  sinfo -N -o '%N %T %C %G'
  local n
  for n in $(node_names); do
    echo "$n $(node_addr "$n") link $(ip -br link show "scdino-$n" 2>/dev/null | awk '{print $2}') $(tc qdisc show dev "scdino-$n" 2>/dev/null | awk '/tbf/{print "tbf", $8}')"
  done
}

cmd_shape() {  # RATE|off
  local rate=${1:?shape RATE (e.g. 1gbit) or off} n burst
  for n in $(node_names); do
    if [ "$rate" = off ]; then
      tc qdisc del dev "scdino-$n" root 2>/dev/null || true
      ip netns exec "scdino-$n" tc qdisc del dev eth0 root 2>/dev/null || true
      continue
    fi
    # A burst of at least one GSO segment (64 KiB) plus a few ms at the rate.
    burst=$(python3 -c "
import re, sys
m = re.fullmatch(r'([0-9.]+)([kmg]?)bit', sys.argv[1].lower())
if not m: sys.exit('shape: ' + sys.argv[1] + ': expected a rate such as 1gbit, 500mbit')
bps = float(m.group(1)) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[m.group(2)]
print(max(256 * 1024, int(bps / 8 / 250)))" "$rate")
    tc qdisc replace dev "scdino-$n" root tbf rate "$rate" burst "$burst" latency 100ms
    ip netns exec "scdino-$n" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 100ms
  done
  say "every node's link shaped to $rate"
}

cmd_lose() {  # NODE
  local n=${1:?lose NODE}
  ip netns list | grep -qw "scdino-$n" || die "no node $n"
  ip link set "scdino-$n" down
  ip netns pids "scdino-$n" | xargs -r kill -9 2>/dev/null || true
  say "$n lost: its slurmd and tasks killed, its link down"
}

cmd_restore() {  # NODE
  local n=${1:?restore NODE}
  node_up "$n" "$(awk '{print $2}' "$state/shape")"
  for _ in $(seq 1 60); do
    scontrol update nodename="$n" state=resume >/dev/null 2>&1 || true
    sinfo -h -n "$n" -o '%T' | grep -qE 'idle|mixed|allocated' && { say "$n restored"; return 0; }
    sleep 1
  done
  die "$n did not come back within 60 s; see $state/nodes/$n/slurmd.log"
}

case ${1:-} in
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env ;;
  shape) shift; cmd_shape "$@" ;;
  lose) shift; cmd_lose "$@" ;;
  restore) shift; cmd_restore "$@" ;;
  exec) shift; n=${1:?exec NODE CMD...}; shift; in_node "$n" "$@" ;;
  *) usage ;;
esac
