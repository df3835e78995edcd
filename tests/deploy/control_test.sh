#!/usr/bin/env bash
# The control channel and metrics of a running trainer, from outside its
# process: scdinoctl status/watch/pause/resume/checkpoint/checkpoints/stop,
# refused tokens, the metrics endpoint moving, a real Prometheus (Debian's
# package, config from monitoring/) finding the trainer through file_sd, and
# promtool on that config. Lines starting with FAIL: fail the ctest.
#
#   bash tests/deploy/control_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source "$(dirname "$0")/../support/lib.sh" control "$1" "$2"
run="$work/ctl"
trainer_pid=
prom_pid=
cleanup() {
  [ -n "$trainer_pid" ] && kill -9 "$trainer_pid" 2>/dev/null
  [ -n "${waiting_pid:-}" ] && kill "$waiting_pid" 2>/dev/null
  [ -n "$prom_pid" ] && kill "$prom_pid" 2>/dev/null
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  echo "--- trainer stderr"; tail -20 "$work/trainer.err" 2>/dev/null
  exit 1
}
field() {  # json-text python-expression-on-s
  $py -c "import json,sys; s=json.loads(sys.argv[1]); print($2)" "$1"
}
status() { "$ctl" status --run-dir "$run" --json; }
iteration() { field "$(status)" 's["progress"]["iteration"]'; }
scrape() {  # series name -> value (first sample)
  $py - "$metrics_url" "$1" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
for line in text.splitlines():
    if line.startswith(sys.argv[2] + " ") or line.startswith(sys.argv[2] + "{"):
        print(line.rsplit(" ", 1)[1]); break
else:
    print("missing")
PY
}
free_port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

cat > "$work/ctl.yaml" <<YAML
meta: {name_of_run: ctl, output_dir: "$work", seed: 5, selected_channel_combination_per_run: ["012"]}
train_scDINO:
  epochs: 5000
  saveckp_freq: 5000
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
scdino:
  threads: 1
  data_source: synthetic
  synthetic: {classes: 2, per_class: 32, channels: 3, size: 16, seed: 1}
  control: {listen: "127.0.0.1:0"}
  metrics: {listen: 127.0.0.1, file_sd_dir: "$work/targets"}
YAML

# watch --wait, started before the run (a job still in the queue): it
# waits for the endpoint and the server, streams, and ends with the run.
"$ctl" watch --wait 120 --run-dir "$run" --json >"$work/waiting.jsonl" 2>"$work/waiting.err" &
waiting_pid=$!
sleep 3
"$build/services/trainer/scdino-trainer" --config "$work/ctl.yaml" >"$work/trainer.out" 2>"$work/trainer.err" &
trainer_pid=$!
for _ in $(seq 1 150); do
  [ -f "$run/endpoints/trainer.json" ] && [ -n "$(ls "$work"/targets/*.json 2>/dev/null)" ] && break
  sleep 0.2
done
[ -f "$run/endpoints/trainer.json" ] || fail "no endpoint file"
[ "$(stat -c %a "$run/control.token")" = 600 ] || fail "control.token is not mode 600"
target=$(field "$(cat "$run"/endpoints/trainer.json)" 's["host"]+":"+str(s["port"])')
# TLS by default: the endpoint names the run's certificate (private, 0600).
cert=$(field "$(cat "$run"/endpoints/trainer.json)" 's["tls"] and s["tls_cert"]')
tls_name=$(field "$(cat "$run"/endpoints/trainer.json)" 's["tls_name"]')
[ -f "$cert" ] && [ "$(stat -c %a "$cert")" = 600 ] && [ "$(stat -c %a "$run/tls/trainer.key")" = 600 ] ||
  fail "the endpoint names no private TLS certificate: $(cat "$run"/endpoints/trainer.json)"
tls=(--tls --tls-ca "$cert" --tls-name "$tls_name")
metrics_url="http://$(field "$(cat "$work"/targets/*.json)" 's[0]["targets"][0]')/metrics"
echo "ok: endpoint $target, metrics $metrics_url"

# Status and progress.
for _ in $(seq 1 100); do [ "$(iteration)" -ge 3 ] && break; sleep 0.1; done
s=$(status) || fail "scdinoctl status failed"
# Every epoch (16 iterations) ends with a checkpoint, so either state is right.
case "$(field "$s" 's["state"]')" in RUN_STATE_RUNNING|RUN_STATE_CHECKPOINTING) ;; *) fail "state is not RUNNING: $s" ;; esac
[ "$(field "$s" 's["progress"]["iterations"]')" = 80000 ] || fail "iterations total: $s"
"$ctl" status --run-dir "$run" | grep -qE "^state +(RUNNING|CHECKPOINTING)" || fail "the status table has no state line"
echo "ok: status"

# Watch: several messages with growing iterations. The first five are kept
# (the watch then ends on the closed pipe); 10 s allow for the test run's
# load (2 s did not, when scdinoctl still loaded LibTorch), and the trainer
# steps every few hundredths of a second.
timeout 10 "$ctl" watch --run-dir "$run" --json | head -n 5 > "$work/watch.jsonl"
$py - "$work/watch.jsonl" <<'PY' || fail "watch did not stream progress"
import json, sys
its = [int(json.loads(l)["progress"]["iteration"]) for l in open(sys.argv[1])]
assert len(its) >= 3 and its == sorted(its) and its[-1] > its[0], its
PY
echo "ok: watch"

# Pause: progress and the iteration counter stop; resume: they move again.
"$ctl" pause --run-dir "$run" >/dev/null || fail "pause failed"
for _ in $(seq 1 50); do [ "$(field "$(status)" 's["state"]')" = RUN_STATE_PAUSED ] && break; sleep 0.1; done
[ "$(field "$(status)" 's["state"]')" = RUN_STATE_PAUSED ] || fail "not PAUSED after pause"
a=$(iteration); ma=$(scrape scdino_trainer_iterations_total)
sleep 1.5
b=$(iteration); mb=$(scrape scdino_trainer_iterations_total)
[ "$a" = "$b" ] && [ "$ma" = "$mb" ] || fail "progress while paused: $a -> $b, metric $ma -> $mb"
"$ctl" resume --run-dir "$run" >/dev/null || fail "resume failed"
sleep 1.5
c=$(iteration); mc=$(scrape scdino_trainer_iterations_total)
[ "$c" -gt "$b" ] || fail "no progress after resume: $b -> $c"
$py -c "import sys; sys.exit(0 if float('$mc') > float('$mb') else 1)" || fail "metric did not move: $mb -> $mc"
echo "ok: pause ($a = $b) and resume ($b -> $c); scdino_trainer_iterations_total $mb -> $mc"

# Checkpoint now, and the list.
path=$("$ctl" checkpoint --run-dir "$run" --json | $py -c 'import json,sys; print(json.load(sys.stdin)["path"])') ||
  fail "checkpoint failed"
[ -f "$path" ] || fail "checkpoint $path does not exist"
"$ctl" checkpoints --run-dir "$run" | grep -qF "$path" || fail "checkpoints does not list $path"
[ "$(scrape scdino_trainer_checkpoint_duration_seconds_count)" != 0 ] || fail "checkpoint duration not observed"
echo "ok: checkpoint $path"

# Wrong token: refused (exit 4), counted, logged without the token.
printf 'not-the-token-of-this-run\n' > "$work/wrong.token"
chmod 600 "$work/wrong.token"
"$ctl" status --target "$target" --token-file "$work/wrong.token" "${tls[@]}" 2>"$work/wrong.err"
rc=$?
[ "$rc" = 4 ] || fail "a wrong token gave exit code $rc, expected 4"
grep -q "refused GetStatus" "$work/trainer.err" || fail "the refused call was not logged"
! grep -qF "$(cat "$run/control.token")" "$work/trainer.err" || fail "the token appears in the log"
! grep -qF "not-the-token" "$work/trainer.err" || fail "the presented token appears in the log"
[ "$(scrape scdino_trainer_control_unauthenticated_requests_total)" = 1 ] || fail "refused call not counted"
"$ctl" status --target "$target" --token-file "$work/none.token" "${tls[@]}" 2>/dev/null
[ $? = 5 ] || fail "a missing token file should give exit code 5"
"$ctl" status --target 127.0.0.1:1 --token-file "$run/control.token" --timeout 2 2>/dev/null
[ $? = 3 ] || fail "an unreachable target should give exit code 3"
echo "ok: wrong token refused and counted; exit codes 3, 4, 5"

# Python's grpcio over TLS with the run's certificate: the three lines of
# docs/control.md, then a wrong token (UNAUTHENTICATED).
$py - "$run" <<'PY' || fail "Python's grpcio could not call the API over TLS with the run's certificate"
import json, sys
import grpc
run = sys.argv[1]
ep = json.load(open(run + "/endpoints/trainer.json"))
creds = grpc.ssl_channel_credentials(open(ep["tls_cert"], "rb").read())
channel = grpc.secure_channel(f'{ep["host"]}:{ep["port"]}', creds, options=[("grpc.ssl_target_name_override", ep["tls_name"])])
metadata = [("authorization", "Bearer " + open(run + "/control.token").read().strip())]
get = channel.unary_unary("/scdino.v1.Control/GetStatus", request_serializer=lambda m: m, response_deserializer=lambda b: b)
reply = get(b"", metadata=metadata, timeout=10)
assert len(reply) > 10, reply
try:
    get(b"", metadata=[("authorization", "Bearer wrong-token-wrong-token")], timeout=10)
    sys.exit("a wrong token was accepted")
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.UNAUTHENTICATED, e.code()
print(f"ok: Python's grpcio over TLS pinned to {ep['tls_fingerprint'][:19]}...: GetStatus {len(reply)} bytes")

# Server reflection as grpcurl asks it (grpc.reflection.v1alpha), behind
# the same token; its answer decoded from the protobuf wire format here.
def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        if key & 7 == 0:
            v, i = varint(b, i)
        elif key & 7 == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"wire type {key & 7}")
        yield key >> 3, v
def varint(b, i):
    v = shift = 0
    while True:
        v |= (b[i] & 0x7F) << shift
        shift += 7
        i += 1
        if not b[i - 1] & 0x80:
            return v, i
reflect = channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                request_serializer=lambda m: m, response_deserializer=lambda b: b)
symbol = b"scdino.v1.Control"
ask = bytes([0x22, len(symbol)]) + symbol  # ServerReflectionRequest{file_containing_symbol}
try:
    list(reflect(iter([ask]), timeout=10))
    sys.exit("reflection answered without a token")
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.UNAUTHENTICATED, e.code()
answer = next(iter(reflect(iter([ask]), metadata=metadata, timeout=10)))
files = [f for n, r in fields(answer) if n == 4 for m, f in fields(r) if m == 1]
methods = {}
for f in files:
    for n, svc in fields(f):
        if n == 6:  # FileDescriptorProto.service
            name = next(v for m, v in fields(svc) if m == 1).decode()
            methods[name] = sorted(next(x for k, x in fields(mth) if k == 1).decode() for m, mth in fields(svc) if m == 2)
assert methods.get("Control") == ["GetStatus", "Pause", "Resume", "Stop", "WatchStatus"], methods
print(f"ok: reflection over TLS with the token only: scdino.v1.Control's methods {methods['Control']}")
PY

# Token rotation: a new private token, the running trainer takes it, the
# old one is refused from then on.
cp "$run/control.token" "$work/old.token"
"$ctl" rotate-token --run-dir "$run" | grep -q "endpoint of trainer signed with it" || fail "rotate-token did not re-sign the endpoint"
! cmp -s "$run/control.token" "$work/old.token" && [ "$(stat -c %a "$run/control.token")" = 600 ] ||
  fail "rotate-token did not write a new private token"
status >/dev/null || fail "status with the rotated token failed"
"$ctl" status --target "$target" --token-file "$work/old.token" "${tls[@]}" 2>/dev/null
[ $? = 4 ] || fail "the old token still works after rotate-token"
echo "ok: rotate-token: the new token works, the old one is refused"

# A real Prometheus with monitoring/'s config, pointed at this test's
# target directory and scraping every second.
promtool check config "$src/monitoring/prometheus/prometheus.yml" || fail "promtool rejects monitoring/prometheus/prometheus.yml"
mkdir -p "$work/prom"
cp "$src/monitoring/prometheus/scdino-rules.yml" "$work/prom/"
sed -e "s|- /shared/scdino/runs/prometheus_targets/\*.json|- $work/targets/*.json|" \
    -e "s|scrape_interval: 15s|scrape_interval: 1s|" -e "s|refresh_interval: 30s|refresh_interval: 1s|" \
    "$src/monitoring/prometheus/prometheus.yml" > "$work/prom/prometheus.yml"
grep -qF "$work/targets" "$work/prom/prometheus.yml" || fail "could not point the config at the target directory"
promtool check config "$work/prom/prometheus.yml" >/dev/null || fail "promtool rejects the test config"
prom_port=$(free_port)
prometheus --config.file="$work/prom/prometheus.yml" --storage.tsdb.path="$work/prom/data" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prom/log.txt" 2>&1 &
prom_pid=$!
query="http://127.0.0.1:$prom_port/api/v1/query?query=scdino_trainer_iterations_total"
found=
for _ in $(seq 1 60); do
  found=$($py - "$query" <<'PY' 2>/dev/null
import json, sys, urllib.request
r = json.load(urllib.request.urlopen(sys.argv[1], timeout=2))["data"]["result"]
if r:
    m = r[0]["metric"]
    print(m["run"], m["service"], m["rank"], r[0]["value"][1])
PY
)
  [ -n "$found" ] && break
  sleep 1
done
[ -n "$found" ] || { tail -5 "$work/prom/log.txt"; fail "Prometheus did not receive the trainer's series"; }
case "$found" in "ctl trainer 0 "*) ;; *) fail "unexpected series labels: $found" ;; esac
echo "ok: Prometheus scraped scdino_trainer_iterations_total {run service rank value} = $found"

# grpc.health.v1 Watch (no token, as a probe or proxy asks): SERVING while
# the run goes on, NOT_SERVING once it ends and before the server stops
# (the stream then ends).
$py - "$run" > "$work/health.out" 2>&1 <<'PY' &
import json, sys
import grpc
run = sys.argv[1]
ep = json.load(open(run + "/endpoints/trainer.json"))
creds = grpc.ssl_channel_credentials(open(ep["tls_cert"], "rb").read())
channel = grpc.secure_channel(f'{ep["host"]}:{ep["port"]}', creds, options=[("grpc.ssl_target_name_override", ep["tls_name"])])
watch = channel.unary_stream("/grpc.health.v1.Health/Watch", request_serializer=lambda m: m, response_deserializer=lambda b: b)
names = {b"\x08\x01": "SERVING", b"\x08\x02": "NOT_SERVING"}
try:
    for reply in watch(b"", timeout=120):  # HealthCheckRequest{service: ""}
        print(names.get(reply, repr(reply)), flush=True)
except grpc.RpcError as e:
    print("ended:", e.code().name, flush=True)
PY
health_pid=$!
for _ in $(seq 1 50); do grep -q SERVING "$work/health.out" 2>/dev/null && break; sleep 0.1; done
grep -qx SERVING "$work/health.out" || fail "health Watch: no SERVING while the run goes on: $(cat "$work/health.out")"

# Graceful stop: exit code 4, a checkpoint at the stopped iteration, the
# endpoint and target files removed.
"$ctl" stop --run-dir "$run" >/dev/null || fail "stop failed"
wait "$trainer_pid"
rc=$?
trainer_pid=
[ "$rc" = 4 ] || fail "the trainer exited with $rc after stop, expected 4"
[ ! -f "$run/endpoints/trainer.json" ] || fail "the endpoint file was left behind"
[ -z "$(ls "$work"/targets/*.json 2>/dev/null)" ] || fail "the file_sd target was left behind"
$py - "$run/checkpoint.safetensors" <<'PY' || fail "no checkpoint after stop"
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
assert int(json.loads(b[8:8 + n])["__metadata__"]["iteration"]) > 0
PY
grep -q "stopped after iteration" "$work/trainer.err" || fail "no stop message"
wait "$health_pid"
[ "$(grep -vx SERVING "$work/health.out" | head -1)" = NOT_SERVING ] ||
  fail "health Watch: NOT_SERVING did not come before the stream ended: $(tr '\n' ' ' < "$work/health.out")"
echo "ok: stop -> checkpoint, exit 4, endpoint and target removed; health Watch: $(tr '\n' ' ' < "$work/health.out")"
for _ in $(seq 1 100); do kill -0 "$waiting_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$waiting_pid" 2>/dev/null && fail "watch --wait went on after the run stopped"
wait "$waiting_pid"
rc=$?
waiting_pid=
grep -qF "waiting up to 120 s for the run in $run to start" "$work/waiting.err" ||
  fail "watch --wait did not say it waits: $(cat "$work/waiting.err")"
$py - "$work/waiting.jsonl" "$rc" <<'PY' || fail "watch --wait, started 3 s before the run: $(cat "$work/waiting.err")"
import json, sys
states = [json.loads(l)["state"] for l in open(sys.argv[1])]
assert len(states) >= 3, f"{len(states)} messages"
assert states[-1] == "RUN_STATE_STOPPED", states[-3:]
assert sys.argv[2] == "0", f"exit {sys.argv[2]} for a run that stopped as asked"
PY
echo "ok: watch --wait started before the run waited, streamed $(wc -l < "$work/waiting.jsonl") messages, ended 0 with the stop"

# A start after a SIGKILL: the killed process's endpoint file is stale;
# scdinoctl names it and sends nothing (exit 5), and the next start of the
# service removes it before it writes its own.
wait_endpoint() {  # pid: the endpoint file of that process
  for _ in $(seq 1 150); do
    [ -f "$run/endpoints/trainer.json" ] && [ "$(field "$(cat "$run"/endpoints/trainer.json)" 's["pid"]')" = "$1" ] && return 0
    sleep 0.2
  done
  fail "no endpoint file of process $1"
}
"$build/services/trainer/scdino-trainer" --config "$work/ctl.yaml" >"$work/trainer.out" 2>"$work/trainer.err" &
trainer_pid=$!
wait_endpoint "$trainer_pid"
killed=$trainer_pid
kill -9 "$killed"
wait "$killed" 2>/dev/null
trainer_pid=
[ -f "$run/endpoints/trainer.json" ] || fail "SIGKILL left no endpoint file to test with"
"$ctl" status --run-dir "$run" >"$work/out" 2>&1 && rc=0 || rc=$?
[ "$rc" = 5 ] && grep -q "stale endpoint file: the trainer process $killed" "$work/out" ||
  fail "the stale endpoint of process $killed was not refused as such ($rc): $(cat "$work/out")"
"$build/services/trainer/scdino-trainer" --config "$work/ctl.yaml" >"$work/trainer.out" 2>"$work/trainer.err" &
trainer_pid=$!
wait_endpoint "$trainer_pid"
grep -q "removed the stale endpoint file of process $killed, which ended without removing it" "$work/trainer.err" ||
  fail "the next start did not remove the stale endpoint file of process $killed"
"$ctl" status --run-dir "$run" >/dev/null || fail "scdinoctl cannot reach the new start"
"$ctl" stop --run-dir "$run" >/dev/null || fail "stop failed"
wait "$trainer_pid"
rc=$?
trainer_pid=
[ "$rc" = 4 ] || fail "the second start exited with $rc after stop, expected 4"
echo "ok: a killed start's endpoint is refused as stale (exit 5) and removed by the next start"
