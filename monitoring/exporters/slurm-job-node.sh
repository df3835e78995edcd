#!/usr/bin/env bash
# Tells Prometheus which Slurm job runs on which node, as a node_exporter
# textfile (docs/monitoring.md#slurm-jobs-and-nodes):
#
#   slurm_job_node_info{jobid="1234",nodename="gpu-st-1",user="alice",partition="gpu"} 1
#
# The GPUs and nodes dashboard and the XID alert join dcgm-exporter and
# node_exporter series to jobs through it (recording rule
# jobid_node:slurm_job_node_info:max). Two ways to run it, both fine together:
#
#   slurm-job-node.sh squeue   every running job, from squeue; on the head
#                              node, every minute (cron or a systemd timer)
#   slurm-job-node.sh prolog   this job on this node, from SLURM_JOB_ID,
#   slurm-job-node.sh epilog   SLURMD_NODENAME, ...: Slurm's Prolog and
#                              Epilog on each compute node (as root); the
#                              mapping exists from the job's first second
#
# --textfile-dir DIR (default $SCDINO_TEXTFILE_DIR, else Debian's
# /var/lib/prometheus/node-exporter) must be node_exporter's
# --collector.textfile.directory. Files are replaced atomically, so a scrape
# never sees half of one.
set -euo pipefail

dir=${SCDINO_TEXTFILE_DIR:-/var/lib/prometheus/node-exporter}
while [ $# -gt 0 ]; do
  case $1 in
    --textfile-dir) dir=$2; shift 2 ;;
    squeue|prolog|epilog) mode=$1; shift ;;
    *) echo "usage: $0 [--textfile-dir DIR] squeue|prolog|epilog" >&2; exit 2 ;;
  esac
done
[ -n "${mode:-}" ] || { echo "usage: $0 [--textfile-dir DIR] squeue|prolog|epilog" >&2; exit 2; }

nl=$'\n'
escape() {  # a Prometheus label value
  local v=${1//\\/\\\\}
  v=${v//\"/\\\"}
  printf '%s' "${v//$nl/\\n}"
}

line() {  # jobid nodename user partition
  printf 'slurm_job_node_info{jobid="%s",nodename="%s",user="%s",partition="%s"} 1\n' \
    "$(escape "$1")" "$(escape "$2")" "$(escape "$3")" "$(escape "$4")"
}

header() {
  printf '# HELP slurm_job_node_info 1 for every node a running Slurm job is allocated\n'
  printf '# TYPE slurm_job_node_info gauge\n'
}

publish() {  # name: stdin becomes DIR/name
  local tmp
  tmp=$(mktemp "$dir/.$1.XXXXXX")
  cat > "$tmp"
  chmod 644 "$tmp"
  mv -f "$tmp" "$dir/$1"
}

mkdir -p "$dir"
case $mode in
  squeue)
    # Read everything first: a failing squeue keeps the last good file.
    jobs=$(squeue --noheader --states=RUNNING --format='%A|%u|%P|%N')
    {
      header
      while IFS='|' read -r jobid user partition nodelist; do
        [ -n "$jobid" ] && [ -n "$nodelist" ] || continue
        for node in $(scontrol show hostnames "$nodelist"); do
          l=$(line "$jobid" "$node" "$user" "$partition")
          # Already published by the prolog on this host: node_exporter
          # refuses a series that two of its files both contain.
          grep -qsxF "$l" "$dir/slurm_job_node_$jobid.prom" || printf '%s\n' "$l"
        done
      done <<< "$jobs"
    } | publish slurm_job_node.prom
    ;;
  prolog)
    : "${SLURM_JOB_ID:?not set: run this as the Slurm Prolog}" "${SLURMD_NODENAME:?not set: run this as the Slurm Prolog}"
    { header; line "$SLURM_JOB_ID" "$SLURMD_NODENAME" "${SLURM_JOB_USER:-}" "${SLURM_JOB_PARTITION:-}"; } |
      publish "slurm_job_node_$SLURM_JOB_ID.prom"
    ;;
  epilog)
    : "${SLURM_JOB_ID:?not set: run this as the Slurm Epilog}"
    rm -f "$dir/slurm_job_node_$SLURM_JOB_ID.prom"
    ;;
esac
