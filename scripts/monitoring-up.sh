#!/usr/bin/env bash
# Starts the head node's monitoring stack from Debian's packages, for
# machines without docker/podman compose (deploy/head-node/compose.yml is the
# other way; docs/monitoring.md): Prometheus, Alertmanager and node_exporter
# as background processes, configured from monitoring/, listening on
# loopback, Prometheus reading its targets from a file_sd directory; and
# Grafana with the scdino dashboards where a Grafana is installed (it is not
# in Debian: otherwise it says what to install, and the provisioning it
# rendered for this stack).
# Installs the packages when missing (root or sudo). Idempotent: run again,
# it re-renders the configuration and reloads what runs, restarts what
# changed, starts what is missing.
#
#   scripts/monitoring-up.sh [start] [options]
#   scripts/monitoring-up.sh stop [--data-dir DIR]
#   scripts/monitoring-up.sh install      # the packages only (promtool, amtool)
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
while [ $# -gt 0 ]; do
  case $1 in
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

running() {  # name -> pid of a live process started by this script, or fail
  local pid
  pid=$(cat "$run/$1.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null && [ "$(cat "/proc/$pid/cmdline" 2>/dev/null | tr '\0' ' ')" = "$(cat "$run/$1.cmd")" ] ||
    return 1
  echo "$pid"
}

stop_one() {
  local pid
  pid=$(running "$1") || { rm -f "$run/$1.pid"; return 0; }
  kill "$pid"
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$run/$1.pid"
  say "stopped $1 ($pid)"
}

if [ "$command" = stop ]; then
  for name in grafana prometheus alertmanager node_exporter; do stop_one "$name"; done
  # The head node's exporter is gone: no target, no MonitoringTargetDown.
  [ -f "$run/head_target" ] && rm -f "$(cat "$run/head_target")" "$run/head_target"
  exit 0
fi

# Debian's packages; the daemons they may start as services are not used.
# Elsewhere (Amazon Linux, RHEL) the same stack runs from containers.
if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  say "this head node has no apt (not Debian or Ubuntu): run the same stack, with the same rules and dashboards," \
      "from containers: SCDINO_GRAFANA_ADMIN_PASSWORD=... SCDINO_FILE_SD_DIR=$sd" \
      "$(command -v podman >/dev/null 2>&1 && echo podman-compose || echo docker compose)" \
      "-f $(cd "$mon/.." && pwd)/deploy/head-node/compose.yml up -d (docs/monitoring.md#with-compose)"
  exit 2
fi
missing=()
for p in prometheus prometheus-alertmanager prometheus-node-exporter; do
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
promtool check config --syntax-only "$data/prometheus/prometheus.yml" >/dev/null ||
  { promtool check config --syntax-only "$data/prometheus/prometheus.yml"; exit 1; }
amtool check-config "$data/alertmanager/alertmanager.yml" >/dev/null ||
  { amtool check-config "$data/alertmanager/alertmanager.yml"; exit 1; }

start_one() {  # name command...: start; reload when it runs as asked; restart when not
  local name=$1 pid
  shift
  if pid=$(running "$name"); then
    if [ "$(cat "$run/$name.cmd")" = "$(printf '%s ' "$@")" ]; then
      kill -HUP "$pid"
      return
    fi
    stop_one "$name"
  fi
  # Detached from this shell and its terminal: the stack outlives the login.
  setsid nohup "$@" >>"$data/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$run/$name.pid"
  printf '%s ' "$@" > "$run/$name.cmd"
}

start_one prometheus /usr/bin/prometheus --config.file="$data/prometheus/prometheus.yml" \
  --storage.tsdb.path="$data/prometheus/data" --web.listen-address="$listen:$prom_port" \
  --web.console.templates=/etc/prometheus/consoles --web.console.libraries=/etc/prometheus/console_libraries
start_one alertmanager /usr/bin/prometheus-alertmanager --config.file="$data/alertmanager/alertmanager.yml" \
  --storage.path="$data/alertmanager/data" --web.listen-address="$listen:$am_port" --cluster.listen-address=
start_one node_exporter /usr/bin/prometheus-node-exporter --web.listen-address="$listen:$node_port" \
  --collector.textfile.directory="$textfile"

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
grafana_bin= grafana_home=
for candidate in grafana grafana-server; do
  if command -v "$candidate" >/dev/null; then grafana_bin=$(command -v "$candidate"); break; fi
done
for home in "${GRAFANA_HOME:-}" /usr/share/grafana /opt/grafana; do
  if [ -n "$home" ] && [ -d "$home/conf" ]; then grafana_home=$home; break; fi
done
grafana_line="grafana        not installed: Grafana is not in Debian; install it from Grafana's own packages (https://grafana.com/docs/grafana/latest/setup-grafana/installation/debian/) and run this again. Its provisioning for this stack: $gdir/provisioning"
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
  start_one grafana "$grafana_bin" "${sub[@]}" --homepath "$grafana_home" --config "$gdir/grafana.ini"
  ready "http://$listen:$grafana_port/api/health" ||
    { tail -5 "$data/logs/grafana.log" >&2; say "grafana did not come up on http://$listen:$grafana_port"; exit 1; }
  grafana_line="grafana        http://$listen:$grafana_port      dashboards $gdir/dashboards (folder scdino)"
elif [ -n "$grafana_bin" ]; then
  grafana_line="grafana        $grafana_bin found, but not its home (conf/ under /usr/share/grafana or \$GRAFANA_HOME); provisioning for this stack: $gdir/provisioning"
fi

cat <<EOF
prometheus     http://$listen:$prom_port      config $data/prometheus/prometheus.yml
alertmanager   http://$listen:$am_port      config $data/alertmanager/alertmanager.yml
node_exporter  http://$listen:$node_port/metrics  textfiles $textfile
targets        $sd
logs           $data/logs
$grafana_line
EOF
