#!/usr/bin/env bash
# Starts the head node's monitoring stack (docs/monitoring.md): Prometheus,
# Alertmanager and node_exporter, configured from monitoring/, listening on
# loopback, Prometheus reading its targets from a file_sd directory; and
# Grafana with the scdino dashboards where a Grafana is installed (it is not
# in Debian: otherwise it says what to install, and the provisioning it
# rendered for this stack).
# On a Debian or Ubuntu head node the daemons are Debian's packages, run as
# background processes (installed when missing: root or sudo). On a head
# node without apt (Amazon Linux, RHEL), or with --containers, the same
# daemons run from containers of podman or docker: Debian's packages in the
# image containers/Dockerfile.monitoring, which the engine builds (or loads,
# --image-archive), with the same command lines, configuration and rules;
# Grafana from --grafana-image when the engine has it.
# Idempotent: run again, it re-renders the configuration and reloads what
# runs, restarts what changed, starts what is missing.
#
#   scripts/monitoring-up.sh [start] [options]
#   scripts/monitoring-up.sh stop [--data-dir DIR]
#   scripts/monitoring-up.sh install      # the packages only (promtool, amtool),
#                                         # or the image with --containers
#
# Options (defaults in brackets):
#   --data-dir DIR            configuration, data, logs, pid files
#                             [${XDG_STATE_HOME:-~/.local/state}/scdino-monitoring]
#   --sd-dir DIR              file_sd directory: the scdino processes' target files,
#                             node_exporter/, dcgm_exporter/, slurm_exporter/
#                             [/shared/scdino/runs/prometheus_targets]
#   --monitoring-dir DIR      the prometheus/ and alertmanager/ configuration, and
#                             grafana/ where it has one [monitoring/]
#   --listen ADDR             [127.0.0.1]
#   --prometheus-port N       [9090]
#   --alertmanager-port N     [9093]
#   --node-exporter-port N    [9100]
#   --grafana-port N          [3000]
#   --textfile-dir DIR        node_exporter's textfile directory, where
#                             monitoring/exporters/slurm-job-node.sh writes
#                             [/var/lib/prometheus/node-exporter]
#   --scrape-interval D       every scrape interval and timeout [prometheus.yml's]
#   --evaluation-interval D   rule evaluation interval [prometheus.yml's]
#   --containers              run the daemons from containers even where apt is
#                             [only where apt is not]
#   --image IMAGE             the daemons' image [localhost/scdino-monitoring:debian12,
#                             built from containers/Dockerfile.monitoring when missing]
#   --image-archive FILE      load the image from FILE (`podman save`) instead of
#                             building it: a head node without Debian's mirror
#   --grafana-image IMAGE     Grafana's image, run when the engine has it
#                             [docker.io/grafana/grafana-oss:10.4.8]
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
command=start
case ${1:-} in start|stop|install) command=$1; shift ;; esac
data=${XDG_STATE_HOME:-$HOME/.local/state}/scdino-monitoring
sd=/shared/scdino/runs/prometheus_targets
mon=$src/monitoring
listen=127.0.0.1
prom_port=9090
am_port=9093
node_port=9100
grafana_port=3000
textfile=/var/lib/prometheus/node-exporter
scrape_interval=
evaluation_interval=
containers=0
image=localhost/scdino-monitoring:debian12
image_archive=
grafana_image=docker.io/grafana/grafana-oss:10.4.8
while [ $# -gt 0 ]; do
  case $1 in
    --containers) containers=1; shift; continue ;;
    --image) image=$2 ;;
    --image-archive) image_archive=$2 ;;
    --grafana-image) grafana_image=$2 ;;
    --data-dir) data=$2 ;;
    --sd-dir) sd=$2 ;;
    --monitoring-dir) mon=$2 ;;
    --listen) listen=$2 ;;
    --prometheus-port) prom_port=$2 ;;
    --alertmanager-port) am_port=$2 ;;
    --node-exporter-port) node_port=$2 ;;
    --grafana-port) grafana_port=$2 ;;
    --textfile-dir) textfile=$2 ;;
    --scrape-interval) scrape_interval=$2 ;;
    --evaluation-interval) evaluation_interval=$2 ;;
    *) sed -n '/^#   scripts\/monitoring-up.sh \[start\]/,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
  esac
  shift 2
done
data=$(realpath -m "$data")
run=$data/run
host=$(hostname -s)
head_target=$sd/node_exporter/head-$host.json

say() { echo "monitoring-up: $*" >&2; }

# How the daemons run: `packages` (background processes of Debian's
# packages) or `containers` (one container each, named after the stack's
# data directory so that two stacks on one host do not meet). A stack is
# stopped the way it was started ($run/mode).
has_apt() { command -v dpkg-query >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; }
mode=packages
{ [ "$containers" = 1 ] || ! has_apt; } && mode=containers
started_as=$(cat "$run/mode" 2>/dev/null || true)
[ "$command" = stop ] && mode=${started_as:-$mode}
if [ "$mode" = containers ] || [ "$started_as" = containers ]; then
  # shellcheck source=../containers/engine.sh
  source "$src/containers/engine.sh"
  if ! scdino_engine_init 2>/dev/null; then
    has_apt || say "this head node has no apt (not Debian or Ubuntu) and no podman or docker to run the stack's" \
      "containers: install podman (or docker with its daemon running) and run this again; or start the same stack" \
      "with compose: SCDINO_GRAFANA_ADMIN_PASSWORD=... SCDINO_FILE_SD_DIR=$sd docker compose" \
      "-f $(cd "$mon/.." && pwd)/deploy/head-node/compose.yml up -d (docs/monitoring.md#with-compose)"
    has_apt && say "--containers: no podman, and no docker whose daemon answers"
    exit 2
  fi
  engine=$scdino_engine
  suffix=$(printf '%s' "$data" | cksum | cut -d' ' -f1)
fi

running() {  # name -> pid, or container, of a live daemon started by this script; or fail
  local pid
  if [ "$mode" = containers ]; then
    pid=$(cat "$run/$1.container" 2>/dev/null) || return 1
    [ "$("$engine" container inspect --format '{{.State.Running}}' "$pid" 2>/dev/null)" = true ] || return 1
  else
    pid=$(cat "$run/$1.pid" 2>/dev/null) || return 1
    kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/cmdline" 2>/dev/null | tr '\0' ' ')" = "$(cat "$run/$1.cmd")" ] ||
      return 1
  fi
  echo "$pid"
}

stop_one() {
  local pid
  if [ "$mode" = containers ]; then
    pid=$(cat "$run/$1.container" 2>/dev/null) || return 0
    # Stopped first: TERM, so Prometheus closes its storage; then removed.
    "$engine" stop -t 10 "$pid" >/dev/null 2>&1 || true
    "$engine" rm -f "$pid" >/dev/null 2>&1 || true
    rm -f "$run/$1.container"
    say "stopped $1 (container $pid)"
    return 0
  fi
  pid=$(running "$1") || { rm -f "$run/$1.pid"; return 0; }
  kill "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$run/$1.pid"
  say "stopped $1 ($pid)"
}

stop_all() {
  for name in grafana prometheus alertmanager node_exporter; do stop_one "$name"; done
  rm -f "$run/mode"
}

if [ "$command" = stop ]; then
  stop_all
  # The head node's exporter is gone: no target, no MonitoringTargetDown.
  [ -f "$run/head_target" ] && rm -f "$(cat "$run/head_target")" "$run/head_target"
  exit 0
fi
if [ -n "$started_as" ] && [ "$started_as" != "$mode" ] && [ "$command" = start ]; then
  say "this stack ran from $started_as: stopping it first"
  (mode=$started_as; stop_all)
fi

# in_image COMMAND...: a command of the daemons' image (promtool, amtool),
# the stack's data directory mounted.
in_image() {
  "$engine" run --rm "${scdino_engine_flags[@]}" --network none --security-opt label=disable -v "$data:$data:ro" \
    "$image" "$@"
}

if [ "$mode" = containers ]; then
  # The image: loaded from --image-archive, or built from Debian's packages.
  mkdir -p "$data/logs"
  if [ -n "$image_archive" ]; then
    [ -f "$image_archive" ] || { say "--image-archive $image_archive: no such file"; exit 2; }
    "$engine" load -i "$image_archive" >/dev/null || { say "$engine could not load $image_archive"; exit 1; }
    scdino_image_exists "$image" || { say "$image_archive holds no image $image (name it with --image)"; exit 2; }
  fi
  if ! scdino_image_exists "$image"; then
    say "building $image with $engine (containers/Dockerfile.monitoring: Debian 12's prometheus," \
        "prometheus-alertmanager and prometheus-node-exporter; log $data/logs/image-build.log)"
    scdino_debian_base docker.io/library/debian:12 bookworm || exit 1
    context=$(mktemp -d)
    build_args=(build "${scdino_engine_flags[@]}" -f "$src/containers/Dockerfile.monitoring" -t "$image")
    [ "$engine" = podman ] && build_args+=(--network host)
    "$engine" "${build_args[@]}" "$context" >"$data/logs/image-build.log" 2>&1 ||
      { rm -rf "$context"; tail -5 "$data/logs/image-build.log" >&2
        say "$engine could not build $image (it needs Debian's mirror; elsewhere load it with --image-archive)"; exit 1; }
    rm -rf "$context"
  fi
  [ "$command" = install ] && exit 0
fi

# Debian's packages; the daemons they may start as services are not used.
missing=()
[ "$mode" = containers ] || for p in prometheus prometheus-alertmanager prometheus-node-exporter; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then sudo=sudo; else sudo=; fi
  # Another apt (unattended upgrades, a parallel set-up) may hold the lock.
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "${missing[@]}" >/dev/null
fi
[ "$command" = install ] && exit 0

# Configuration: monitoring/ as it is, but for the directories, addresses
# and intervals of this start.
mkdir -p "$run" "$data/prometheus" "$data/alertmanager" "$data/logs" "$textfile" \
  "$sd/node_exporter" "$sd/dcgm_exporter" "$sd/slurm_exporter"
cp "$mon"/prometheus/scdino-*.yml "$data/prometheus/"
sed -e "s|/shared/scdino/runs/prometheus_targets|$sd|" \
    -e "s|127.0.0.1:9090|$listen:$prom_port|" -e "s|127.0.0.1:9093|$listen:$am_port|" \
    ${scrape_interval:+-e "s|^\( *\)scrape_interval: .*|\1scrape_interval: $scrape_interval|"} \
    ${scrape_interval:+-e "s|^\( *\)scrape_timeout: .*|\1scrape_timeout: $scrape_interval|"} \
    ${evaluation_interval:+-e "s|^\( *\)evaluation_interval: .*|\1evaluation_interval: $evaluation_interval|"} \
    "$mon/prometheus/prometheus.yml" > "$data/prometheus/prometheus.yml"
cp "$mon/alertmanager/alertmanager.yml" "$data/alertmanager/alertmanager.yml"
tool=()
[ "$mode" = containers ] && tool=(in_image)
"${tool[@]}" promtool check config --syntax-only "$data/prometheus/prometheus.yml" >/dev/null ||
  { "${tool[@]}" promtool check config --syntax-only "$data/prometheus/prometheus.yml"; exit 1; }
"${tool[@]}" amtool check-config "$data/alertmanager/alertmanager.yml" >/dev/null ||
  { "${tool[@]}" amtool check-config "$data/alertmanager/alertmanager.yml"; exit 1; }
echo "$mode" > "$run/mode"

start_one() {  # name [--with engine-args... --] command...: start; reload when it runs as asked; restart when not
  local name=$1 pid extra=()
  shift
  if [ "$1" = --with ]; then
    shift
    while [ "$1" != -- ]; do extra+=("$1"); shift; done
    shift
  fi
  if pid=$(running "$name"); then
    if [ "$(cat "$run/$name.cmd")" = "$(printf '%s ' "${extra[@]}" "$@")" ]; then
      # Prometheus and Alertmanager reread their configuration on HUP;
      # node_exporter and Grafana have none to reread (and HUP ends them).
      case $name in
        prometheus|alertmanager)
          if [ "$mode" = containers ]; then "$engine" kill --signal HUP "$pid" >/dev/null; else kill -HUP "$pid"; fi ;;
      esac
      return
    fi
    stop_one "$name"
  fi
  if [ "$mode" = containers ]; then
    # One container a daemon, on the host's network, the data directory at
    # its own path; its output to the same log as from the packages.
    local container=scdino-monitoring-$name-$suffix from=$image
    [ "$name" = grafana ] && from=$grafana_image
    "$engine" rm -f "$container" >/dev/null 2>&1 || true
    # SELinux (RHEL's default) would keep a container from the host's files
    # it mounts; relabelling them (:z) is no option for the host's root.
    "$engine" run -d --name "$container" "${scdino_engine_flags[@]}" --network host --restart unless-stopped \
      --security-opt label=disable \
      -v "$data:$data" "${extra[@]}" --entrypoint /bin/sh "$from" \
      -c 'exec "$@" >>"$0" 2>&1' "$data/logs/$name.log" "$@" >/dev/null ||
      { say "$engine could not start $name from $from"; exit 1; }
    echo "$container" > "$run/$name.container"
  else
    # Detached from this shell and its terminal: the stack outlives the login.
    setsid nohup "$@" >>"$data/logs/$name.log" 2>&1 < /dev/null &
    echo $! > "$run/$name.pid"
  fi
  printf '%s ' "${extra[@]}" "$@" > "$run/$name.cmd"
}

# From a container: the file_sd directory (Prometheus), and the host's
# root, processes and textfiles (node_exporter, which then reports the host).
sd_mount=() node_mounts=() rootfs=()
if [ "$mode" = containers ]; then
  sd_mount=(--with -v "$sd:$sd:ro" --)
  node_mounts=(--with --pid host -v /:/host:ro,rslave -v "$textfile:$textfile:ro" --)
  rootfs=(--path.rootfs=/host)
fi
start_one prometheus "${sd_mount[@]}" /usr/bin/prometheus --config.file="$data/prometheus/prometheus.yml" \
  --storage.tsdb.path="$data/prometheus/data" --web.listen-address="$listen:$prom_port" \
  --web.console.templates=/etc/prometheus/consoles --web.console.libraries=/etc/prometheus/console_libraries
start_one alertmanager /usr/bin/prometheus-alertmanager --config.file="$data/alertmanager/alertmanager.yml" \
  --storage.path="$data/alertmanager/data" --web.listen-address="$listen:$am_port" --cluster.listen-address=
start_one node_exporter "${node_mounts[@]}" /usr/bin/prometheus-node-exporter --web.listen-address="$listen:$node_port" \
  --collector.textfile.directory="$textfile" "${rootfs[@]}"

# The head node's own exporter, as exporter-targets.sh would write it.
tmp=$(mktemp "$head_target.XXXXXX")
printf '[{"targets": ["%s:%s"], "labels": {"node": "%s"}}]\n' "$listen" "$node_port" "$host" > "$tmp"
chmod 644 "$tmp"
mv -f "$tmp" "$head_target"
echo "$head_target" > "$run/head_target"

ready() {  # url: up to 30 s
  python3 - "$1" <<'PY'
import sys, time, urllib.request
for _ in range(150):
    try:
        urllib.request.urlopen(sys.argv[1], timeout=1).read()
        sys.exit(0)
    except Exception:
        time.sleep(0.2)
sys.exit(1)
PY
}
for spec in "prometheus http://$listen:$prom_port/-/ready" "alertmanager http://$listen:$am_port/-/ready" \
            "node_exporter http://$listen:$node_port/metrics"; do
  set -- $spec
  ready "$2" || { tail -5 "$data/logs/$1.log" >&2; say "$1 did not come up on $2"; exit 1; }
done

# Grafana, provisioned for this stack: the data sources at this start's
# addresses, the dashboards from monitoring/grafana/dashboards.
gdir=$data/grafana
# The dashboards and provisioning: --monitoring-dir's when it has them.
gmon=$mon/grafana
[ -d "$gmon/dashboards" ] || gmon=$src/monitoring/grafana
mkdir -p "$gdir/provisioning/datasources" "$gdir/provisioning/dashboards" "$gdir/dashboards" "$gdir/data" \
  "$gdir/provisioning/plugins" "$gdir/provisioning/alerting"
sed -e "s|http://127.0.0.1:9090|http://$listen:$prom_port|" -e "s|http://127.0.0.1:9093|http://$listen:$am_port|" \
  "$gmon/provisioning/datasources/scdino.yml" > "$gdir/provisioning/datasources/scdino.yml"
sed -e "s|path: /etc/grafana/dashboards/scdino|path: $gdir/dashboards|" \
  "$gmon/provisioning/dashboards/scdino.yml" > "$gdir/provisioning/dashboards/scdino.yml"
cp "$gmon"/dashboards/*.json "$gdir/dashboards/"
grafana_bin= grafana_home= grafana_with=()
if [ "$mode" = containers ]; then
  # Grafana's own image (its program and home at these paths), as root so
  # that it writes the stack's data directory.
  scdino_image_exists "$grafana_image" && grafana_bin=grafana grafana_home=/usr/share/grafana grafana_with=(--with --user 0 --)
  grafana_line="grafana        not started: $engine has no $grafana_image; pull it ($engine pull $grafana_image) or load it ($engine load -i FILE) and run this again. Its provisioning for this stack: $gdir/provisioning"
else
  for candidate in grafana grafana-server; do
    if command -v "$candidate" >/dev/null; then grafana_bin=$(command -v "$candidate"); break; fi
  done
  for home in "${GRAFANA_HOME:-}" /usr/share/grafana /opt/grafana; do
    if [ -n "$home" ] && [ -d "$home/conf" ]; then grafana_home=$home; break; fi
  done
  grafana_line="grafana        not installed: Grafana is not in Debian; install it from Grafana's own packages (https://grafana.com/docs/grafana/latest/setup-grafana/installation/debian/) and run this again. Its provisioning for this stack: $gdir/provisioning"
fi
if [ -n "$grafana_bin" ] && [ -n "$grafana_home" ]; then
  cat > "$gdir/grafana.ini" <<INI
[server]
http_addr = $listen
http_port = $grafana_port
[paths]
data = $gdir/data
logs = $data/logs
plugins = $gdir/data/plugins
provisioning = $gdir/provisioning
[analytics]
reporting_enabled = false
check_for_updates = false
INI
  # Grafana 9 and later: `grafana server`; before: `grafana-server`.
  sub=()
  [ "$(basename "$grafana_bin")" = grafana ] && sub=(server)
  start_one grafana "${grafana_with[@]}" "$grafana_bin" "${sub[@]}" --homepath "$grafana_home" --config "$gdir/grafana.ini"
  ready "http://$listen:$grafana_port/api/health" ||
    { tail -5 "$data/logs/grafana.log" >&2; say "grafana did not come up on http://$listen:$grafana_port"; exit 1; }
  grafana_line="grafana        http://$listen:$grafana_port      dashboards $gdir/dashboards (folder scdino)"
elif [ -n "$grafana_bin" ]; then
  grafana_line="grafana        $grafana_bin found, but not its home (conf/ under /usr/share/grafana or \$GRAFANA_HOME); provisioning for this stack: $gdir/provisioning"
fi

from="Debian's packages"
[ "$mode" = containers ] && from="containers of $engine ($image)"
cat <<EOF
from           $from
prometheus     http://$listen:$prom_port      config $data/prometheus/prometheus.yml
alertmanager   http://$listen:$am_port      config $data/alertmanager/alertmanager.yml
node_exporter  http://$listen:$node_port/metrics  textfiles $textfile
targets        $sd
logs           $data/logs
$grafana_line
EOF
