#!/usr/bin/env bash
# The head node's stack live, as scripts/monitoring-up.sh starts it (Debian's
# Prometheus, Alertmanager, node_exporter on loopback), against a trainer,
# scdino-features and scdino-eval on generated data, dcgm-exporter and Slurm
# exporter samples (fixture_server.py) and a slurm_job_node_info textfile written
# by the prolog script. Then: every query of every dashboard returns series
# (query_panels.py), no rule fails to evaluate, the stall alert stays silent
# while the paused trainer makes no progress, and a killed trainer's
# ScdinoTargetDown reaches Alertmanager with its run and Slurm job labels.
# Alert windows and `for` durations are divided by 60 in a test copy of the
# rules (10 min -> 10 s) and Prometheus scrapes and evaluates every second.
# Lines starting with FAIL: fail the ctest.
#
#   bash tests/monitoring/live_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source "$(dirname "$0")/../support/lib.sh" monitoring-live "$1" "$2"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  bash "$src/scripts/monitoring-up.sh" stop --data-dir "$work/stack" 2>/dev/null
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for f in "$work"/*.err "$work"/stack/logs/prometheus.log; do
    [ -s "$f" ] && { echo "--- $f"; tail -5 "$f"; }
  done
  exit 1
}
free_port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
started=$(date +%s)
node=$(hostname -s)  # as Slurm names nodes, and the dcgm relabelling leaves them
# A file with two channel combinations, as scDINO's users write it: the run
# is combination 0's, labelled <name_of_run>/<folder>, which the dashboards'
# Run and Combination variables pick.
run_name=mon
run_label="$run_name/vit_channel_A_B_C"
run="$work/runs/$run_label"
# A Slurm job id for processes that are not under Slurm: it is only a label.
job=$((700000 + RANDOM))

query() {  # PromQL -> number of series now
  $py - "$prom" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url = sys.argv[1] + "/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
print(len(json.load(urllib.request.urlopen(url, timeout=10))["data"]["result"]))
PY
}
wait_for() {  # seconds PromQL: until it returns a series
  for _ in $(seq 1 "$1"); do [ "$(query "$2")" -gt 0 ] 2>/dev/null && return 0; sleep 1; done
  return 1
}

# 1. The stack, with the test copy of the rules.
mkdir -p "$work/monitoring"
cp -r "$src/monitoring/prometheus" "$src/monitoring/alertmanager" "$work/monitoring/"
$py - "$work/monitoring/prometheus" <<'PY' || fail "could not scale the rules' durations"
import glob, re, sys
def scaled(m):
    seconds = int(m.group(2)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(3)]
    return f"{m.group(1)}{max(1, seconds // 60)}s{m.group(4)}"
for path in glob.glob(sys.argv[1] + "/scdino-*.yml"):
    text = open(path).read()
    text = re.sub(r"(for: |offset |\[)(\d+)([smhd])(\b|\])", scaled, text)
    open(path, "w").write(text)
PY
grep -q 'iterations_total{job="scdino"}\[10s\]' "$work/monitoring/prometheus/scdino-rules.yml" ||
  fail "the test rules were not scaled"
prom_port=$(free_port)
am_port=$(free_port)
node_port=$(free_port)
fixture_port=$(free_port)
prom="http://127.0.0.1:$prom_port"
am="http://127.0.0.1:$am_port"
bash "$src/scripts/monitoring-up.sh" --data-dir "$work/stack" --sd-dir "$work/targets" \
  --monitoring-dir "$work/monitoring" --textfile-dir "$work/textfile" --prometheus-port "$prom_port" \
  --alertmanager-port "$am_port" --node-exporter-port "$node_port" --scrape-interval 1s \
  --evaluation-interval 1s >"$work/up.out" 2>"$work/up.err" || fail "scripts/monitoring-up.sh failed"
echo "ok: stack up: Prometheus :$prom_port, Alertmanager :$am_port, node_exporter :$node_port"
# Grafana: provisioned for this stack's Prometheus and Alertmanager; started
# and serving the scdino dashboards where it is installed, else named as
# what to install (it is not in Debian).
grep -q "url: http://127.0.0.1:$prom_port" "$work/stack/grafana/provisioning/datasources/scdino.yml" ||
  fail "Grafana's data source does not point at this stack's Prometheus"
grep -q "path: $work/stack/grafana/dashboards" "$work/stack/grafana/provisioning/dashboards/scdino.yml" ||
  fail "Grafana's dashboard provider does not point at the rendered dashboards"
[ "$(ls "$work/stack/grafana/dashboards"/*.json | wc -l)" = "$(ls "$src"/monitoring/grafana/dashboards/*.json | wc -l)" ] ||
  fail "not every dashboard was rendered for Grafana"
grafana_line=$(grep '^grafana ' "$work/up.out") || fail "scripts/monitoring-up.sh says nothing of Grafana"
if grep -q "http://" <<<"$grafana_line" && ! grep -q "not installed" <<<"$grafana_line"; then
  grafana_url=$(grep -o 'http://[^ ]*' <<<"$grafana_line" | head -1)
  $py - "$grafana_url" <<'PY' || fail "Grafana does not list the scdino dashboards: $grafana_line"
import base64, json, sys, time, urllib.request
auth = base64.b64encode(b"admin:admin").decode()
for _ in range(60):
    req = urllib.request.Request(sys.argv[1] + "/api/search?folderIds=&query=", headers={"Authorization": "Basic " + auth})
    titles = [d["title"] for d in json.load(urllib.request.urlopen(req, timeout=5)) if d.get("type") == "dash-db"]
    if len(titles) >= 4:
        print("ok: Grafana lists", titles)
        sys.exit(0)
    time.sleep(1)
sys.exit(1)
PY
else
  grep -q "not installed: Grafana is not in Debian" <<<"$grafana_line" ||
    fail "without Grafana, monitoring-up.sh should say what to install: $grafana_line"
  echo "ok: no Grafana here; monitoring-up.sh says: $grafana_line"
fi

# 2. dcgm-exporter (one release names the host Hostname, with a domain;
# another hostname) and the Slurm exporter, from fixtures; the job-to-node
# mapping from the prolog script.
$py "$src/tests/monitoring/fixture_server.py" "$fixture_port" "$src/tests/monitoring/fixtures" "$node" &
pids+=($!)
target() {  # file, then the path of each target: whole files only, Prometheus rereads on change
  local file=$1 sep= json=
  shift
  for path in "$@"; do
    json+="$sep{\"targets\": [\"127.0.0.1:$fixture_port\"], \"labels\": {\"__metrics_path__\": \"$path\"}}"
    sep=", "
  done
  echo "[$json]" > "$file.tmp" && mv "$file.tmp" "$file"
}
target "$work/targets/dcgm_exporter/fixture.json" /dcgm-exporter /dcgm-exporter-hostname
target "$work/targets/slurm_exporter/fixture.json" /slurm-exporter
SLURM_JOB_ID=$job SLURMD_NODENAME=$node SLURM_JOB_USER=$(id -un) SLURM_JOB_PARTITION=test \
  bash "$src/monitoring/exporters/slurm-job-node.sh" --textfile-dir "$work/textfile" prolog ||
  fail "slurm-job-node.sh prolog failed"

# 2b. The job's preflight on 2 ranks (torchrun-style variables, Gloo): rank
# 0's figures land in node_exporter's textfile directory.
cat > "$work/preflight.yaml" <<YAML
meta: {name_of_run: preflight, output_dir: "$work/runs"}
scdino: {threads: 1, data_source: synthetic, preflight: {max_bytes: 65536, seconds_per_size: 0.05}}
YAML
preflight_port=$(free_port)
for r in 0 1; do
  SLURM_JOB_ID=$job RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$preflight_port \
    "$build/services/preflight/scdino-preflight" --config "$work/preflight.yaml" --textfile-dir "$work/textfile" \
    >"$work/preflight$r.out" 2>"$work/preflight$r.err" &
  preflight_pids[$r]=$!
done
for r in 0 1; do wait "${preflight_pids[$r]}" || fail "scdino-preflight rank $r exited $?: $(tail -3 "$work/preflight$r.err")"; done
grep -q "scdino_preflight_passed{slurm_job_id=\"$job\"} 1" "$work/textfile/scdino-preflight.prom" ||
  fail "no preflight textfile: $(cat "$work/textfile/scdino-preflight.prom" 2>&1)"

# 3. A trainer on in-memory synthetic cells that runs until killed,
# checkpointing every 10 epochs (a few seconds).
config() {  # file, data source lines
  cat > "$1" <<YAML
meta: {name_of_run: $run_name, output_dir: "$work/runs", dataset_dir: "$work/data", folder_depth_for_labels: 0,
       train_datasetsplit_fraction: 0.75, seed: 5, channel_dict: {0: A, 1: B, 2: C},
       selected_channel_combination_per_run: ["012", "12"]}
train_scDINO:
  dino_vit_name: vit
  epochs: 5000
  saveckp_freq: 10
  batch_size_per_gpu: 8
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
downstream_analyses:
  compute_cls_features: {batch_size_per_gpu: 1, num_workers: 1, resize: True, resize_length: 16}
  attention_visualisation: {num_images_per_class: 1, image_size: 16}
  kNN: {global: {n_neighbors: [5, 20], temperature: 0.07}}
scdino:
  device: cpu
  threads: 1
$2
  cache_images: true
  control: {listen: "127.0.0.1:0"}
  metrics: {listen: 127.0.0.1, file_sd_dir: "$work/targets"}
YAML
}
config "$work/trainer.yaml" "  data_source: synthetic
  synthetic: {classes: 2, per_class: 32, channels: 3, size: 16, seed: 1}"
SLURM_JOB_ID=$job "$build/services/trainer/scdino-trainer" --config "$work/trainer.yaml" \
  >"$work/trainer.out" 2>"$work/trainer.err" &
trainer_pid=$!
pids+=($trainer_pid)
checkpoint="$run/checkpoint0009.safetensors"
for _ in $(seq 1 120); do [ -f "$checkpoint" ] && break; sleep 0.5; done
[ -f "$checkpoint" ] || fail "the trainer wrote no checkpoint0009 within 60 s"
echo "ok: trainer running (Slurm job label $job), $(basename "$checkpoint") written"

# 4. scdino-features and scdino-eval following the trainer (both live as
# long as it does, so Prometheus, which takes up new file_sd targets only
# every 5 s, scrapes them whatever the machine's load): the features
# follower, paused as soon as its control API answers, is stopped through
# the API once scraped; the evaluator exports kNN accuracy per checkpoint.
"$build/services/tools/scdino-synth" --out "$work/data" --classes 2 --per-class 400 --channels 3 --size 16 --seed 1 \
  >/dev/null 2>"$work/synth.err" || fail "scdino-synth failed"
config "$work/files.yaml" "  data_source: folder"
SLURM_JOB_ID=$job "$build/services/features/scdino-features" --config "$work/files.yaml" --follow \
  >"$work/features.out" 2>"$work/features.err" &
features_pid=$!
pids+=($features_pid)
for _ in $(seq 1 100); do
  [ -f "$run/endpoints/features.json" ] && "$ctl" pause --run-dir "$run" --service features >/dev/null 2>&1 && break
  kill -0 "$features_pid" 2>/dev/null || fail "scdino-features --follow ended before its control API answered"
  sleep 0.1
done
wait_for 30 "scdino_features_build_info{run=\"$run_label\"}" || fail "Prometheus did not scrape scdino-features in 30 s"
# Its throughput panels are rates over 10 s: two scrapes within that
# window before it stops (a loaded machine's first scrapes of a new file_sd
# target can be seconds apart; CI's run once had only one).
wait_for 60 "rate(scdino_features_images_processed_total{run=\"$run_label\"}[10s])" ||
  fail "the features follower's counter was not scraped twice within 10 s in 60 s"
"$ctl" stop --run-dir "$run" --service features >/dev/null || fail "scdinoctl stop --service features failed"
wait "$features_pid"
features_rc=$?
[ "$features_rc" = 4 ] || fail "scdino-features --follow exited $features_rc after an API stop (expected 4)"
SLURM_JOB_ID=$job "$build/services/eval/scdino-eval" --config "$work/files.yaml" --follow \
  >"$work/eval.out" 2>"$work/eval.err" &
pids+=($!)
wait_for 60 "scdino_eval_knn_top1_ratio{run=\"$run_label\"}" ||
  fail "scdino-eval --follow exported no kNN accuracy within 60 s"
# Its rate panels need two scrapes within their 10 s window; on a loaded
# machine (CTest runs the container builds beside this) the first scrapes
# of a new file_sd target can be seconds apart.
wait_for 60 "rate(scdino_eval_queries_processed_total{run=\"$run_label\"}[10s])" ||
  fail "the follower's progress counter was not scraped twice within 10 s in 60 s"
echo "ok: scdino-features --follow scraped, stopped through the API (exit 4); scdino-eval --follow exports kNN accuracy"

# 5. Every source answers, and the GPUs of both dcgm-exporter label styles
# land on the node slurm_job_node_info names.
for what in "up{job=\"node_exporter\"} == 1" "up{job=\"dcgm_exporter\"} == 1" "up{job=\"slurm_exporter\"} == 1" \
            "jobid_node:slurm_job_node_info:max{jobid=\"$job\", node=\"$node\"}" \
            "scdino_trainer_build_info{run=\"$run_label\", slurm_job_id=\"$job\"}"; do
  wait_for 30 "$what" || fail "no series for $what"
done
[ "$(query "DCGM_FI_DEV_GPU_UTIL{node=\"$node\"}")" = 2 ] ||
  fail "expected GPUs 0 (Hostname with a domain) and 1 (hostname) on node $node: $(query 'DCGM_FI_DEV_GPU_UTIL')"
echo "ok: node_exporter, dcgm-exporter (Hostname and hostname), Slurm exporter and slurm_job_node_info scraped"

# 6. Paused, the trainer makes no progress and yet ScdinoTrainerStalled
# stays silent: the state gauge says paused. The panels are queried
# meanwhile.
"$ctl" pause --run-dir "$run" >/dev/null || fail "scdinoctl pause failed"
wait_for 20 "scdino_trainer_state{run=\"$run_label\", state=\"paused\"} == 1" ||
  fail "Prometheus does not see the trainer paused (scdino_trainer_state)"
paused_at=$(date +%s)
$py "$src/tests/monitoring/query_panels.py" --prometheus "$prom" --source "$src" --start "$started" --cpu \
  --var name_of_run="$run_name" --var run="$run_label" --var job="$job" --var k=20 > "$work/panels.out"
panels_rc=$?
cat "$work/panels.out"
# The Run variable is the file's name_of_run (its regex applied) and the
# Combination variable the run under it.
grep -q "^training.json: variables name_of_run=$run_name, run=$run_label, " "$work/panels.out" ||
  fail "the training dashboard's Run and Combination variables are not $run_name and $run_label"
$py - "$prom" <<'PY' || fail "rules that fail to evaluate (above)"
import json, sys, urllib.request
groups = json.load(urllib.request.urlopen(sys.argv[1] + "/api/v1/rules", timeout=10))["data"]["groups"]
bad = [f"{r['name']}: {r.get('lastError')}" for g in groups for r in g["rules"] if r.get("health") != "ok"]
print("\n".join(f"FAIL: rule {b}" for b in bad) or f"ok: {sum(len(g['rules']) for g in groups)} rules evaluate")
sys.exit(1 if bad else 0)
PY
$py "$src/tests/monitoring/metric_docs.py" --prometheus "$prom" "$src" || fail "live metrics not documented (above)"
# Window (10 s) and for (5 s) of the scaled rule, and some margin.
while [ $(( $(date +%s) - paused_at )) -lt 22 ]; do
  [ "$(query "ALERTS{alertname=\"ScdinoTrainerStalled\", run=\"$run_label\"}")" = 0 ] ||
    fail "ScdinoTrainerStalled is pending or firing for a paused trainer"
  sleep 1
done
[ "$(query "increase(scdino_trainer_iterations_total{run=\"$run_label\"}[10s]) == 0")" -gt 0 ] ||
  fail "the paused trainer's iteration counter still moves: the silence proves nothing"
echo "ok: paused $(( $(date +%s) - paused_at )) s without progress, ScdinoTrainerStalled silent"

# 7. A killed trainer leaves its target behind: ScdinoTargetDown reaches
# Alertmanager with the labels that say which run and Slurm job.
kill -9 "$trainer_pid"
found=
for _ in $(seq 1 60); do
  found=$($py - "$am" "$run_label" <<'PY' 2>/dev/null
import json, sys, urllib.parse, urllib.request
q = urllib.parse.urlencode({"filter": ['alertname="ScdinoTargetDown"', f'run="{sys.argv[2]}"', 'service="trainer"']},
                           doseq=True)
for a in json.load(urllib.request.urlopen(f"{sys.argv[1]}/api/v2/alerts?{q}", timeout=5)):
    if a["status"]["state"] == "active":
        l = a["labels"]
        print(l["job"], l["run"], l["service"], l["rank"], l.get("slurm_job_id", "-"), l["severity"])
PY
)
  [ -n "$found" ] && break
  sleep 1
done
[ "$found" = "scdino $run_label trainer 0 $job warning" ] ||
  fail "Alertmanager has no active ScdinoTargetDown for the killed trainer with its labels (got '$found')"
echo "ok: trainer killed -> ScdinoTargetDown in Alertmanager {job run service rank slurm_job_id severity} = $found"
# Last, so that the alert checks run whatever the panels lack.
[ "$panels_rc" = 0 ] || fail "dashboard queries without series (above)"
echo "ok: live test took $(( $(date +%s) - started )) s"
