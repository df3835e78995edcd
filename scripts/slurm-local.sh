#!/usr/bin/env bash
# Installs and starts a real single-node Slurm (Debian's slurm-wlm and munge)
# on this machine, for the tests that submit deploy/slurm/*.sbatch. Uses the
# node's real CPU count and memory; proctrack/linuxproc and task/none, so it
# needs no cgroups. Idempotent: a running cluster is left as it is.
#
#   bash scripts/slurm-local.sh          # start (installs on first use)
#   bash scripts/slurm-local.sh stop
#   bash scripts/slurm-local.sh install  # the packages and munge only (scripts/slurm-cluster.sh)
set -euo pipefail
state=${SCDINO_SLURM_STATE:-/var/tmp/scdino-slurm}
conf_dir=/etc/slurm
# This Slurm's commands read /etc/slurm, whatever the caller's environment
# says (scripts/slurm-cluster.sh env points them at the test cluster).
unset SLURM_CONF

if [ "${1:-start}" = stop ]; then
  # By pid file: the test cluster's daemons are slurmd and slurmctld too.
  for d in slurmd slurmctld; do
    f="$state/$d.pid"
    [ -s "$f" ] && [ "$(cat "/proc/$(cat "$f")/comm" 2>/dev/null)" = "$d" ] && kill "$(cat "$f")" 2>/dev/null || true
  done
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! command -v runc >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm munge runc >/dev/null
fi

# munge: one key, the daemon running as root is fine for a test cluster.
mkdir -p /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0700 /etc/munge; chmod 0400 /etc/munge/munge.key
pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged 2>/dev/null || /usr/sbin/munged --force
[ "${1:-start}" != install ] || exit 0

host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 - 1024 ))
mkdir -p "$state"/{ctld,d} /var/log/slurm "$conf_dir"

cat > "$conf_dir/slurm.conf.new" <<CONF
ClusterName=scdino-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
# A job made eligible by a time (a requeued job's hold, lifted by the tests)
# starts at the next scheduling pass: every second here, not after the
# 30 s of backfill's default interval, which was most of a stop test's time.
SchedulerParameters=bf_interval=1,sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/d
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ReturnToService=2
MpiDefault=none
JobRequeue=1
KillWait=30
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF

# A running Slurm is left as it is; one started from another configuration
# (an older checkout's) reads this one.
if sinfo -h -o '%T' 2>/dev/null | grep -qE 'idle|mixed|allocated'; then
  if cmp -s "$conf_dir/slurm.conf.new" "$conf_dir/slurm.conf"; then
    rm "$conf_dir/slurm.conf.new"
  else
    mv "$conf_dir/slurm.conf.new" "$conf_dir/slurm.conf"
    scontrol reconfigure
  fi
  exit 0
fi
mv "$conf_dir/slurm.conf.new" "$conf_dir/slurm.conf"

# Slurm's own container support (srun --container=OCI_BUNDLE) through
# Debian's runc: one task per node in Slurm 22.05. crun does not run on
# these machines' cgroup layout. %n.%u.%j.%s.%t names a container per task.
runc_root=$state/runc
cat > "$conf_dir/oci.conf" <<CONF
RunTimeQuery="runc --root=$runc_root state %n.%u.%j.%s.%t"
RunTimeKill="runc --root=$runc_root kill -a %n.%u.%j.%s.%t SIGTERM"
RunTimeDelete="runc --root=$runc_root delete --force %n.%u.%j.%s.%t"
RunTimeRun="runc --root=$runc_root run %n.%u.%j.%s.%t -b %b"
CONF

# running PIDFILE NAME: that process runs (its name, not a bare kill -0: pids wrap around).
running() { [ -s "$1" ] && [ "$(cat "/proc/$(cat "$1")/comm" 2>/dev/null)" = "$2" ]; }
running "$state/slurmctld.pid" slurmctld || slurmctld
running "$state/slurmd.pid" slurmd || slurmd
for _ in $(seq 1 60); do
  if sinfo -h -o '%T' 2>/dev/null | grep -qE 'idle|mixed|allocated'; then
    exit 0
  fi
  scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
  sleep 1
done
echo "scdino: Slurm did not come up; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
sinfo >&2 || true
exit 1
