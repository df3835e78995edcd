#!/usr/bin/env bash
# Writes the file_sd targets of the exporters that the head node's
# Prometheus scrapes besides the scdino processes
# (docs/monitoring.md#compute-node-exporters), under DIR (default
# /shared/scdino/runs/prometheus_targets, what monitoring/prometheus/
# prometheus.yml reads):
#
#   node_exporter/slurm-<node>.json   node_exporter of every compute node
#   dcgm_exporter/slurm-<node>.json   dcgm-exporter of every GPU node
#   node_exporter/head-<host>.json    --head-node-exporter ADDR (this host)
#   slurm_exporter/head-<host>.json   --slurm-exporter ADDR
#
# Compute nodes come from sinfo: nodes that are up (not powered down,
# powering up or down, or not responding); GPU nodes are those with a gpu
# gres. Or give them: NODE for a CPU node, NODE:gpu for a GPU node. Compute
# node files of nodes no longer listed are removed, so a cloud node that
# powered down raises no alert: on clusters that scale, run this every few
# minutes (cron or a systemd timer) on the head node.
#
#   exporter-targets.sh [--sd-dir DIR] [--node-port 9100] [--dcgm-port 9400]
#                       [--head-node-exporter HOST:PORT] [--slurm-exporter HOST:PORT]
#                       [NODE[:gpu]...]
set -euo pipefail

usage() {
  sed -n '/^#   exporter-targets.sh/,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}
dir=/shared/scdino/runs/prometheus_targets
node_port=9100
dcgm_port=9400
head_node_exporter=
slurm_exporter=
nodes=()
while [ $# -gt 0 ]; do
  case $1 in
    --sd-dir) dir=$2; shift 2 ;;
    --node-port) node_port=$2; shift 2 ;;
    --dcgm-port) dcgm_port=$2; shift 2 ;;
    --head-node-exporter) head_node_exporter=$2; shift 2 ;;
    --slurm-exporter) slurm_exporter=$2; shift 2 ;;
    -*) usage ;;
    *) nodes+=("$1"); shift ;;
  esac
done

target() {  # file address node: one target whose `node` label is node
  local tmp
  mkdir -p "$(dirname "$1")"
  tmp=$(mktemp "$1.XXXXXX")
  printf '[{"targets": ["%s"], "labels": {"node": "%s"}}]\n' "$2" "$3" > "$tmp"
  chmod 644 "$tmp"
  # Prometheus rereads the file on change: never let it see half of one.
  mv -f "$tmp" "$1"
}

host=$(hostname -s)
[ -z "$head_node_exporter" ] || target "$dir/node_exporter/head-$host.json" "$head_node_exporter" "$host"
[ -z "$slurm_exporter" ] || target "$dir/slurm_exporter/head-$host.json" "$slurm_exporter" "$host"

if [ ${#nodes[@]} -eq 0 ]; then
  if ! command -v sinfo >/dev/null; then
    echo "exporter-targets.sh: no sinfo here and no NODE given: compute nodes left as they are" >&2
    exit 0
  fi
  # One line per node and partition; %t ends in ~ # % * ! for nodes that are
  # powered down, powering up or down, or not responding.
  while IFS='|' read -r node state gres; do
    case $state in *'~'|*'#'|*'%'|*'*'|*'!'|down*) continue ;; esac
    case $gres in *gpu*) nodes+=("$node:gpu") ;; *) nodes+=("$node") ;; esac
  done < <(sinfo --noheader --Node --format='%N|%t|%G' | sort -u)
fi

declare -A keep=()
for spec in "${nodes[@]}"; do
  node=${spec%:gpu}
  target "$dir/node_exporter/slurm-$node.json" "$node:$node_port" "$node"
  keep["node_exporter/slurm-$node.json"]=1
  if [ "$spec" != "$node" ]; then
    target "$dir/dcgm_exporter/slurm-$node.json" "$node:$dcgm_port" "$node"
    keep["dcgm_exporter/slurm-$node.json"]=1
  fi
done
for f in "$dir"/node_exporter/slurm-*.json "$dir"/dcgm_exporter/slurm-*.json; do
  [ -e "$f" ] || continue
  [ -n "${keep[${f#"$dir"/}]:-}" ] || rm -f "$f"
done
echo "exporter-targets.sh: ${#nodes[@]} compute nodes in $dir" >&2
