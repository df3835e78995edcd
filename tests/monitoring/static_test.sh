#!/usr/bin/env bash
# What monitoring/ asks of Prometheus and Alertmanager, without running them:
# promtool check config/rules, the rules' unit tests (every alert must have
# one where it fires and one where it stays silent), amtool check-config, and
# the exporter scripts against fake Slurm commands. Lines starting with FAIL:
# fail the ctest.
#
#   bash tests/monitoring/static_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source "$(dirname "$0")/../support/lib.sh" monitoring-static "$1" "$2"
mkdir -p "$work/bin"
prom="$src/monitoring/prometheus"
fail() { echo "FAIL: $*"; status=1; }
status=0

bash "$src/scripts/monitoring-up.sh" install || fail "could not install Prometheus and Alertmanager"
promtool check config "$prom/prometheus.yml" || fail "promtool check config monitoring/prometheus/prometheus.yml"
promtool check rules "$prom"/scdino-*.yml || fail "promtool check rules"
(cd "$prom/tests" && promtool test rules *.yml) || fail "promtool test rules monitoring/prometheus/tests"
amtool check-config "$src/monitoring/alertmanager/alertmanager.yml" || fail "amtool check-config"

# Every alert is tested firing (exp_alerts) and silent (an eval without).
python3 - "$prom" <<'PY' || fail "alert rules without unit tests (above)"
import glob, re, sys
prom = sys.argv[1]
alerts = set(re.findall(r"^\s*- alert:\s*(\S+)", open(f"{prom}/scdino-rules.yml").read(), re.M))
fires, silent = set(), set()
for path in glob.glob(f"{prom}/tests/*.yml"):
    text = open(path).read()
    for block in re.split(r"\n\s*- eval_time:", text)[1:]:
        m = re.search(r"alertname:\s*(\S+)", block)
        if m:
            (fires if "exp_alerts:" in block.split("- eval_time:")[0] else silent).add(m.group(1))
bad = False
for a in sorted(alerts):
    for kind, have in (("firing", fires), ("silent", silent)):
        if a not in have:
            print(f"FAIL: {a} has no unit test where it is {kind}")
            bad = True
print(f"{len(alerts)} alerts, each tested firing and silent" if not bad else "")
sys.exit(1 if bad else 0)
PY

# slurm-job-node.sh: squeue mode with a fake squeue/scontrol, prolog and
# epilog modes; the textfiles must be valid exposition format.
cat > "$work/bin/squeue" <<'SH'
#!/bin/sh
printf '41|alice|gpu|gpu-[1-2]\n42|bo"b|cpu|cpu-1\n43|carol|gpu|\n'
SH
cat > "$work/bin/scontrol" <<'SH'
#!/bin/sh
case $3 in 'gpu-[1-2]') printf 'gpu-1\ngpu-2\n' ;; *) echo "$3" ;; esac
SH
chmod +x "$work"/bin/*
job_node="$src/monitoring/exporters/slurm-job-node.sh"
PATH="$work/bin:$PATH" bash "$job_node" --textfile-dir "$work/textfile" squeue || fail "slurm-job-node.sh squeue failed"
SLURM_JOB_ID=41 SLURMD_NODENAME=gpu-1 SLURM_JOB_USER=alice SLURM_JOB_PARTITION=gpu \
  bash "$job_node" --textfile-dir "$work/textfile" prolog || fail "slurm-job-node.sh prolog failed"
expected='slurm_job_node_info{jobid="41",nodename="gpu-1",user="alice",partition="gpu"} 1
slurm_job_node_info{jobid="41",nodename="gpu-2",user="alice",partition="gpu"} 1
slurm_job_node_info{jobid="42",nodename="cpu-1",user="bo\"b",partition="cpu"} 1'
[ "$(grep -v '^#' "$work/textfile/slurm_job_node.prom")" = "$expected" ] ||
  fail "squeue mode wrote: $(cat "$work/textfile/slurm_job_node.prom")"
grep -qx 'slurm_job_node_info{jobid="41",nodename="gpu-1",user="alice",partition="gpu"} 1' \
  "$work/textfile/slurm_job_node_41.prom" || fail "prolog mode wrote: $(cat "$work/textfile/slurm_job_node_41.prom")"
# Run again after the prolog: the pair the prolog published is left out.
PATH="$work/bin:$PATH" bash "$job_node" --textfile-dir "$work/textfile" squeue
! grep -q 'nodename="gpu-1"' "$work/textfile/slurm_job_node.prom" || fail "squeue mode repeats the prolog's series"
for f in "$work"/textfile/*.prom; do
  promtool check metrics < "$f" 2>&1 | grep -v "counter metrics should have" | grep . && fail "$f is not clean exposition format"
done
SLURM_JOB_ID=41 bash "$job_node" --textfile-dir "$work/textfile" epilog
[ ! -e "$work/textfile/slurm_job_node_41.prom" ] || fail "epilog left slurm_job_node_41.prom"
[ -z "$(ls -A "$work/textfile" | grep -v '\.prom$')" ] || fail "temporary files left: $(ls -A "$work/textfile")"
echo "ok: slurm-job-node.sh squeue, prolog, epilog"

# exporter-targets.sh: up nodes from a fake sinfo, GPU nodes by gres, stale
# compute-node targets removed, head-node targets kept.
cat > "$work/bin/sinfo" <<'SH'
#!/bin/sh
printf 'cpu-1|idle|(null)\ncpu-1|idle|(null)\ngpu-1|mix|gpu:h100:8\ngpu-2|idle~|gpu:h100:8\ncpu-3|down*|(null)\ncpu-4|drain|(null)\n'
SH
chmod +x "$work/bin/sinfo"
sd="$work/targets"
mkdir -p "$sd/node_exporter"
echo '[]' > "$sd/node_exporter/slurm-gone.json"
echo '[]' > "$sd/node_exporter/head-other.json"
PATH="$work/bin:$PATH" bash "$src/monitoring/exporters/exporter-targets.sh" --sd-dir "$sd" \
  --slurm-exporter 127.0.0.1:9092 2>/dev/null || fail "exporter-targets.sh failed"
got=$(cd "$sd" && find . -name '*.json' | sort | tr '\n' ' ')
[ "$got" = "./dcgm_exporter/slurm-gpu-1.json ./node_exporter/head-other.json ./node_exporter/slurm-cpu-1.json ./node_exporter/slurm-cpu-4.json ./node_exporter/slurm-gpu-1.json ./slurm_exporter/head-$(hostname -s).json " ] ||
  fail "exporter-targets.sh wrote $got"
python3 -c 'import json, sys; t = json.load(open(sys.argv[1])); assert t == [{"targets": ["gpu-1:9400"], "labels": {"node": "gpu-1"}}], t' \
  "$sd/dcgm_exporter/slurm-gpu-1.json" || fail "dcgm target of gpu-1"
echo "ok: exporter-targets.sh"

# compute-node-exporters.sh: node_exporter from Debian's package as a
# process of its own, serving the textfile directory, and not started
# twice; elsewhere (no apt) from its image with podman, dcgm-exporter on a
# GPU node; refused naming what is missing without an engine.
ne_port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$work/ne-textfile"
echo 'scdino_static_test_marker 1' > "$work/ne-textfile/marker.prom"
ne=(bash "$src/scripts/compute-node-exporters.sh" --process --listen "127.0.0.1:$ne_port"
    --textfile-dir "$work/ne-textfile" --run-dir "$work/ne-run")
out=$("${ne[@]}" 2>&1) || fail "compute-node-exporters.sh: $out"
grep -q "node_exporter answers on 127.0.0.1:$ne_port/metrics" <<<"$out" &&
  $py -c 'import sys, urllib.request; sys.exit("scdino_static_test_marker 1" not in urllib.request.urlopen(sys.argv[1]).read().decode())' \
    "http://127.0.0.1:$ne_port/metrics" || fail "node_exporter on :$ne_port without the textfile's metric: $out"
again=$("${ne[@]}" 2>&1) && grep -q "node_exporter already runs on 127.0.0.1:$ne_port" <<<"$again" ||
  fail "compute-node-exporters.sh started a second node_exporter: $again"
kill "$(cat "$work/ne-run/node_exporter.pid")" 2>/dev/null
if command -v podman >/dev/null; then
  out=$(PATH=$(path_without dpkg-query apt-get docker) bash "$src/scripts/compute-node-exporters.sh" --gpu --dry-run 2>&1) ||
    fail "compute-node-exporters.sh --gpu --dry-run without apt: $out"
  grep -q "podman run -d --name scdino-node-exporter --restart unless-stopped --net host --pid host -v /:/host:ro,rslave .*--path.rootfs=/host --web.listen-address=:9100 --collector.textfile.directory=/var/lib/prometheus/node-exporter" <<<"$out" &&
    grep -q "podman run -d --name scdino-dcgm-exporter .*--net host --device nvidia.com/gpu=all .*-f /etc/dcgm-exporter/dcp-metrics-included.csv" <<<"$out" ||
    fail "compute-node-exporters.sh without apt, with podman: $out"
fi
out=$(PATH=$(path_without dpkg-query apt-get podman docker) bash "$src/scripts/compute-node-exporters.sh" 2>&1) && rc=0 || rc=$?
[ "$rc" = 2 ] && grep -q "no apt (Debian, Ubuntu) and no podman or docker" <<<"$out" ||
  fail "compute-node-exporters.sh without apt or an engine (exit $rc): $out"
echo "ok: compute-node-exporters.sh"

bash -n "$src/scripts/monitoring-up.sh" || fail "scripts/monitoring-up.sh does not parse"
# (A head node without apt: tests/monitoring/containers_test.sh.)

# Every repository path deploy/head-node/compose.yml mounts exists, but the
# user's secrets (git-ignored: htpasswd, TLS key and certificate).
python3 - "$src" <<'PY' || fail "deploy/head-node/compose.yml mounts paths that do not exist (above)"
import os, re, sys
src = sys.argv[1]
head = os.path.join(src, "deploy", "head-node")
ignored = open(os.path.join(src, ".gitignore")).read().split()
bad = False
for m in re.finditer(r"^\s+- (?:\$\{\w+:-)?(\.\.?/[^:}]+)\}?:", open(os.path.join(head, "compose.yml")).read(), re.M):
    path = os.path.normpath(os.path.join(head, m.group(1)))
    rel = "/" + os.path.relpath(path, src)
    if not os.path.exists(path) and rel not in ignored and rel + "/" not in ignored:
        print(f"FAIL: compose.yml mounts {m.group(1)}, which does not exist")
        bad = True
sys.exit(1 if bad else 0)
PY
exit $status
