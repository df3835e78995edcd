#!/usr/bin/env bash
# The head node's stack on a head node without apt (Amazon Linux, RHEL), as
# scripts/monitoring-up.sh runs it there: Prometheus, Alertmanager and
# node_exporter from containers of this machine's podman (the image
# containers/Dockerfile.monitoring, built from Debian's packages), with no
# apt, dpkg, Prometheus tool or daemon of the host on the script's PATH.
#   - the daemons come up on free loopback ports and scrape each other and
#     the head node's exporter, with the rules of monitoring/ loaded;
#   - node_exporter reports the host (its textfiles, its host name);
#   - run again, Prometheus rereads its configuration in the same
#     containers; a second stack with its own data directory runs beside,
#     with Grafana from its image (a stand-in of Grafana's: its dashboards
#     provisioned, its data source answering from its container);
#   - stop removes its containers and the head node's target;
#   - bad input: an image archive that does not exist; a head node with
#     neither apt nor an engine (the compose line instead).
# Lines starting with FAIL: fail the ctest.
#
#   bash tests/monitoring/containers_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source "$(dirname "$0")/../support/lib.sh" monitoring-containers "$1" "$2"
source "$src/containers/engine.sh"
scdino_engine_init || { echo "FAIL: no container engine"; exit 1; }
engine=$scdino_engine
fail() {
  echo "FAIL: $*"
  for f in "$work"/*.err "$work"/stack*/logs/*.log; do [ -s "$f" ] && { echo "--- $f"; tail -5 "$f"; }; done
  exit 1
}
# The host's apt, dpkg and Prometheus programs out of reach: whatever runs
# comes from the image.
nohost=$(path_without dpkg-query apt-get promtool amtool prometheus prometheus-alertmanager prometheus-node-exporter)
up() { PATH=$nohost bash "$src/scripts/monitoring-up.sh" "$@"; }
standin=localhost/scdino-test-grafana-standin:latest  # Grafana's image, a stand-in (below)
cleanup() {
  up stop --data-dir "$work/stack" >/dev/null 2>&1
  up stop --data-dir "$work/stack2" >/dev/null 2>&1
  "$engine" rmi "$standin" >/dev/null 2>&1
}
trap cleanup EXIT
free_port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
api() {  # URL PYTHON-EXPRESSION over the JSON `d`: prints its value
  $py - "$1" "$2" <<'PY'
import json, sys, urllib.request
d = json.load(urllib.request.urlopen(sys.argv[1], timeout=10))
print(eval(sys.argv[2]))
PY
}
get() {  # URL: its body; fails when nothing answers
  $py -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1" 2>/dev/null
}
containers_of() { "$engine" ps --filter "name=scdino-monitoring-.*-$1\$" --format '{{.ID}} {{.Names}}' | sort; }

prom_port=$(free_port) am_port=$(free_port) node_port=$(free_port)
prom=http://127.0.0.1:$prom_port
mkdir -p "$work/textfile"
echo 'scdino_containers_test_marker 1' > "$work/textfile/marker.prom"
args=(--data-dir "$work/stack" --sd-dir "$work/sd" --textfile-dir "$work/textfile" --prometheus-port "$prom_port"
      --alertmanager-port "$am_port" --node-exporter-port "$node_port" --scrape-interval 1s --evaluation-interval 1s)
start=$(date +%s)
up "${args[@]}" >"$work/up.out" 2>"$work/up.err" || fail "monitoring-up.sh without apt failed: $(tail -3 "$work/up.err")"
cat "$work/up.out"
grep -q "^from           containers of $engine (localhost/scdino-monitoring:debian12)" "$work/up.out" ||
  fail "without apt, the stack did not run from containers"
grep -q "^grafana        not started: $engine has no docker.io/grafana/grafana-oss:10.4.8; pull it" "$work/up.out" ||
  "$engine" image exists docker.io/grafana/grafana-oss:10.4.8 || fail "the Grafana line does not say how to get its image"
suffix=$(printf '%s' "$work/stack" | cksum | cut -d' ' -f1)
first=$(containers_of "$suffix")
[ "$(wc -l <<<"$first")" = 3 ] || fail "expected three containers, got: $first"
echo "ok: up from containers in $(( $(date +%s) - start )) s (the image built when missing)"

# Every target up (the stack's own three, the head node's exporter through
# file_sd), the rules loaded, node_exporter reporting the host.
[ -f "$work/sd/node_exporter/head-$(hostname -s).json" ] || fail "no head node target in the file_sd directory"
for _ in $(seq 1 30); do
  health=$(api "$prom/api/v1/targets" '" ".join(sorted(t["labels"]["job"] + "=" + t["health"] for t in d["data"]["activeTargets"]))')
  [ "$health" = "alertmanager=up node_exporter=up prometheus=up" ] && break
  sleep 1
done
[ "$health" = "alertmanager=up node_exporter=up prometheus=up" ] || fail "targets: $health"
groups=$(api "$prom/api/v1/rules" 'len(d["data"]["groups"])')
want=$(grep -c '^  - name:' "$src"/monitoring/prometheus/scdino-*.yml | awk -F: '{s += $2} END {print s}')
[ "$groups" = "$want" ] && [ "$groups" -gt 0 ] || fail "$groups rule groups loaded, monitoring/ has $want"
metrics=$(get "http://127.0.0.1:$node_port/metrics")
grep -q '^scdino_containers_test_marker 1' <<<"$metrics" || fail "node_exporter does not read the host's textfiles"
grep -q "^node_uname_info{.*nodename=\"$(uname -n)\"" <<<"$metrics" || fail "node_exporter does not report the host"
echo "ok: targets $health; $groups rule groups; node_exporter reports the host $(uname -n)"

# Run again: the same containers, Prometheus's configuration reread.
loads() { grep -c "Completed loading of configuration file" "$work/stack/logs/prometheus.log"; }
before=$(loads)
up "${args[@]}" >"$work/up2.out" 2>"$work/up2.err" || fail "the second start failed: $(tail -3 "$work/up2.err")"
for _ in $(seq 1 20); do [ "$(loads)" -gt "$before" ] && break; sleep 0.5; done
[ "$(loads)" -gt "$before" ] || fail "Prometheus did not reread its configuration on the second start"
[ "$(containers_of "$suffix")" = "$first" ] || fail "the second start replaced containers: $(containers_of "$suffix")"
echo "ok: run again, Prometheus reread its configuration in the same three containers"

# A second stack beside it, from its own data directory, with Grafana from
# its image: Grafana's own is on no registry here, so a stand-in of it
# (tests/support/grafana-standin: its layout, and a `grafana server` that
# refuses what Grafana would, serves the provisioned dashboards' titles and
# asks the data source's Prometheus from inside its container).
"$engine" build "${scdino_engine_flags[@]}" -t "$standin" "$src/tests/support/grafana-standin" >"$work/standin.log" 2>&1 ||
  fail "could not build the Grafana stand-in: $(tail -3 "$work/standin.log")"
p2=$(free_port) a2=$(free_port) n2=$(free_port) g2=$(free_port)
up --data-dir "$work/stack2" --sd-dir "$work/sd2" --textfile-dir "$work/textfile" --prometheus-port "$p2" \
  --alertmanager-port "$a2" --node-exporter-port "$n2" --grafana-port "$g2" --grafana-image "$standin" \
  >"$work/up3.out" 2>"$work/up3.err" || fail "a second stack failed: $(tail -3 "$work/up3.err")"
get "http://127.0.0.1:$p2/-/ready" >/dev/null || fail "the second stack's Prometheus is not ready"
grep -q "^grafana        http://127.0.0.1:$g2 " "$work/up3.out" || fail "the Grafana line: $(grep grafana "$work/up3.out")"
suffix2=$(printf '%s' "$work/stack2" | cksum | cut -d' ' -f1)
[ "$("$engine" inspect --format '{{.ImageName}} {{.Config.User}}' "scdino-monitoring-grafana-$suffix2")" = "$standin 0" ] ||
  fail "Grafana's container: $("$engine" inspect --format '{{.ImageName}} {{.Config.User}}' "scdino-monitoring-grafana-$suffix2")"
titles=$(api "http://127.0.0.1:$g2/api/search" '" | ".join(sorted(x["title"] for x in d))')
want=$($py -c 'import glob, json, sys; print(" | ".join(sorted(json.load(open(f))["title"] for f in glob.glob(sys.argv[1] + "/*.json"))))' \
  "$src/monitoring/grafana/dashboards")
[ "$titles" = "$want" ] || fail "Grafana's dashboards: $titles; monitoring/grafana/dashboards has $want"
source_health=$(api "http://127.0.0.1:$g2/api/datasources/uid/scdino-prometheus/health" 'd["status"]')
[ "$source_health" = OK ] || fail "Grafana's data source scdino-prometheus: $source_health"
echo "ok: Grafana from its image (a stand-in) beside the second stack: its $(ls "$src"/monitoring/grafana/dashboards/*.json | wc -l) dashboards, its data source (the stack's Prometheus) answering from its container"
up stop --data-dir "$work/stack2" >/dev/null 2>&1
[ "$(containers_of "$suffix")" = "$first" ] || fail "stopping the second stack touched the first"
[ -z "$("$engine" ps -a --filter "name=-$suffix2\$" -q)" ] || fail "stop left the second stack's containers"
echo "ok: a second stack ran beside it and stopped alone"

# Stop: no container, no target left.
up stop --data-dir "$work/stack" 2>"$work/stop.err" || fail "stop failed: $(cat "$work/stop.err")"
[ -z "$(containers_of "$suffix")" ] && [ -z "$("$engine" ps -a --filter "name=-$suffix\$" -q)" ] ||
  fail "stop left containers: $("$engine" ps -a --filter "name=-$suffix\$" --format '{{.Names}}')"
[ ! -e "$work/sd/node_exporter/head-$(hostname -s).json" ] || fail "stop left the head node's target"
! get "$prom/-/ready" >/dev/null || fail "Prometheus still answers after stop"
echo "ok: stopped: no container, no target"

# Bad input.
out=$(up --image-archive "$work/none.tar" --data-dir "$work/stack3" 2>&1) && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q -- "--image-archive $work/none.tar: no such file" <<<"$out" ||
  fail "a missing image archive (exit $rc): $out"
out=$(PATH=$(path_without dpkg-query apt-get podman docker) bash "$src/scripts/monitoring-up.sh" --sd-dir "$work/sd" \
  --data-dir "$work/stack3" 2>&1) && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "no apt (not Debian or Ubuntu) and no podman or docker.*SCDINO_FILE_SD_DIR=$work/sd .*-f $src/deploy/head-node/compose.yml up -d" <<<"$out" ||
  fail "no apt and no engine (exit $rc): $out"
echo "ok: a missing image archive and a node with neither apt nor an engine are refused, naming what is missing"
