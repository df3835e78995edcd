#!/usr/bin/env bash
# The exporters a compute node needs for the dashboards, installed and
# started by one command on the node (docs/monitoring.md#compute-node-exporters):
#   - node_exporter, with the textfile directory that
#     monitoring/exporters/slurm-job-node.sh and scdino-pack/-preflight write:
#     from Debian's or Ubuntu's package (prometheus-node-exporter; a systemd
#     service where systemd runs, else a process of its own), or, on other
#     distributions (Amazon Linux, RHEL), from the prom/node-exporter image
#     with podman or docker;
#   - with --gpu, NVIDIA's dcgm-exporter (no distribution packages it) from
#     its image, on the host's network so that its Hostname label is the
#     node's, with the profiling fields the GPU dashboard shows.
#
#   sudo scripts/compute-node-exporters.sh [--gpu] [--listen ADDR:PORT] [--textfile-dir DIR]
#                                          [--process] [--run-dir DIR] [--dry-run]
#
#   --listen ADDR:PORT    node_exporter's address [:9100, every address]
#   --textfile-dir DIR    its textfile collector's directory
#                         [/var/lib/prometheus/node-exporter]
#   --process             a process of its own even where systemd runs (a
#                         second exporter beside the service, a test cluster)
#   --run-dir DIR         where a node_exporter started as a process keeps
#                         its pid file and log [/run/scdino-exporters]
#   --dry-run             print what it would run, run nothing
#
# Ends when node_exporter answers at ADDR:PORT/metrics (exit 0), or says what
# is missing (exit 2: no package manager it knows and no podman or docker;
# --gpu without an engine) or what failed (exit 1). Then, on the head node:
# monitoring/exporters/exporter-targets.sh.
set -euo pipefail

listen=:9100 textfile=/var/lib/prometheus/node-exporter run_dir=/run/scdino-exporters gpu=0 dry=0 process=0
NODE_EXPORTER_IMAGE=${SCDINO_NODE_EXPORTER_IMAGE:-docker.io/prom/node-exporter:v1.8.2}
DCGM_EXPORTER_IMAGE=${SCDINO_DCGM_EXPORTER_IMAGE:-nvcr.io/nvidia/k8s/dcgm-exporter:3.3.7-3.5.0-ubuntu22.04}
say() { echo "scdino-exporters: $*"; }
die() { echo "scdino-exporters: $*" >&2; exit "${2:-2}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --gpu) gpu=1 ;;
    --listen) [ $# -ge 2 ] || die "--listen needs ADDR:PORT"; listen=$2; shift ;;
    --textfile-dir) [ $# -ge 2 ] || die "--textfile-dir needs a directory"; textfile=$2; shift ;;
    --run-dir) [ $# -ge 2 ] || die "--run-dir needs a directory"; run_dir=$2; shift ;;
    --process) process=1 ;;
    --dry-run) dry=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (--help lists them)" ;;
  esac
  shift
done
case $listen in *:[0-9]*) ;; *) die "--listen $listen: expected ADDR:PORT (:9100 for every address)" ;; esac
run() { if [ "$dry" = 1 ]; then echo "$*"; else "$@"; fi; }
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
engine=""
for e in podman docker; do command -v "$e" >/dev/null 2>&1 && { engine=$e; break; }; done

# node_exporter, from the distribution's package or from its image.
args=(--web.listen-address="$listen" --collector.textfile.directory="$textfile")
run $sudo mkdir -p "$textfile"
if command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  if ! dpkg-query -W -f='${Status}' prometheus-node-exporter 2>/dev/null | grep -q '^install ok installed$'; then
    say "installing prometheus-node-exporter"
    run $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=600 prometheus-node-exporter
  fi
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1 && [ "$process" = 0 ]; then
    # The package's service, with these flags.
    say "node_exporter as the systemd service prometheus-node-exporter (/etc/default/prometheus-node-exporter)"
    if [ "$dry" = 1 ]; then
      echo "ARGS=\"${args[*]}\" > /etc/default/prometheus-node-exporter"
    else
      echo "ARGS=\"${args[*]}\"" | $sudo tee /etc/default/prometheus-node-exporter >/dev/null
    fi
    run $sudo systemctl enable prometheus-node-exporter
    run $sudo systemctl restart prometheus-node-exporter
  else
    # No systemd (a container, a namespace): a process of its own, once.
    pid_file="$run_dir/node_exporter.pid"
    if [ -s "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null &&
       tr '\0' ' ' < "/proc/$(cat "$pid_file")/cmdline" 2>/dev/null | grep -qF -- "--web.listen-address=$listen "; then
      say "node_exporter already runs on $listen (pid $(cat "$pid_file"))"
    elif [ "$dry" = 1 ]; then
      run setsid prometheus-node-exporter "${args[@]}"
    else
      mkdir -p "$run_dir"
      setsid prometheus-node-exporter "${args[@]}" > "$run_dir/node_exporter.log" 2>&1 < /dev/null &
      echo $! > "$pid_file"
      say "node_exporter started on $listen (pid $!, log $run_dir/node_exporter.log)"
    fi
  fi
elif [ -n "$engine" ]; then
  # Not Debian or Ubuntu: the same exporter from its image, seeing the host.
  say "no apt here: node_exporter from $NODE_EXPORTER_IMAGE with $engine"
  run $sudo "$engine" rm -f scdino-node-exporter >/dev/null 2>&1 || true
  run $sudo "$engine" run -d --name scdino-node-exporter --restart unless-stopped --net host --pid host \
    -v /:/host:ro,rslave -v "$textfile:$textfile:ro" "$NODE_EXPORTER_IMAGE" --path.rootfs=/host "${args[@]}"
else
  die "cannot install node_exporter here: no apt (Debian, Ubuntu) and no podman or docker to run $NODE_EXPORTER_IMAGE"
fi

# dcgm-exporter on a GPU node: only as a container.
if [ "$gpu" = 1 ]; then
  [ -n "$engine" ] || die "--gpu: dcgm-exporter runs from $DCGM_EXPORTER_IMAGE, and this node has no podman or docker"
  gpus=(--gpus all)
  [ "$engine" = podman ] && gpus=(--device nvidia.com/gpu=all)
  say "dcgm-exporter from $DCGM_EXPORTER_IMAGE with $engine on :9400"
  run $sudo "$engine" rm -f scdino-dcgm-exporter >/dev/null 2>&1 || true
  run $sudo "$engine" run -d --name scdino-dcgm-exporter --restart unless-stopped --net host "${gpus[@]}" \
    --cap-add SYS_ADMIN "$DCGM_EXPORTER_IMAGE" -f /etc/dcgm-exporter/dcp-metrics-included.csv -a :9400
fi
[ "$dry" = 0 ] || exit 0

# node_exporter answers.
host=${listen%:*}
host=${host:-127.0.0.1}
for _ in $(seq 1 50); do
  if timeout 2 bash -c "exec 3<>/dev/tcp/$host/${listen##*:} && printf 'GET /metrics HTTP/1.0\r\n\r\n' >&3 && grep -q '^node_exporter_build_info' <&3" 2>/dev/null; then
    say "node_exporter answers on $host:${listen##*:}/metrics (textfiles: $textfile); add this node on the head node:" \
        "monitoring/exporters/exporter-targets.sh"
    exit 0
  fi
  sleep 0.2
done
die "node_exporter does not answer on $host:${listen##*:}/metrics after 10 s" 1
