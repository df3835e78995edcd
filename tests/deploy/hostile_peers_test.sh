#!/usr/bin/env bash
# A two-rank training run against what another user on its node can do to
# it, from outside its processes (the parts have unit tests of their own:
# Coordinator.AForgedMarkAndAHalfSentMessageNeverEndTheRendezvous,
# ServerTest.ThreeThousandIdleStreamsAreBoundedAndTheShortCallsStillAnswer):
#   1. during the rendezvous, marks forged at public names of rank 0's store
#      (LibTorch's TCPStore, from Python's torch) and a half-sent store
#      message held open;
#   2. during training, another half-sent store message held open and
#      3,000 idle WatchStatus streams over 50 connections, half without the
#      token, half with it, from Python's grpcio, while scdinoctl status
#      answers;
# and the run still finishes with its normal exit (0) on both ranks, its
# last checkpoint written. Lines starting with FAIL: fail the ctest.
#
#   bash tests/deploy/hostile_peers_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source "$(dirname "$0")/../support/lib.sh" hostile "$1" "$2"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; }
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  for r in 0 1; do echo "--- rank $r"; tail -15 "$work/rank$r.err" 2>/dev/null; done
  exit 1
}
port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
run="$work/hostile"
cat > "$work/hostile.yaml" <<YAML
meta: {name_of_run: hostile, output_dir: "$work", seed: 5, selected_channel_combination_per_run: ["012"]}
train_scDINO:
  epochs: 300
  saveckp_freq: 1000
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
scdino:
  threads: 1
  data_source: synthetic
  synthetic: {classes: 2, per_class: 16, channels: 3, size: 16, seed: 1}
  control: {listen: "127.0.0.1:0"}
  metrics: {enabled: false}
YAML
start_rank() {
  (cd "$work" && exec env -u SLURM_JOB_ID -u SLURM_PROCID -u SLURM_NTASKS WORLD_SIZE=2 RANK=$1 LOCAL_RANK=$1 \
     LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
     "$build/services/trainer/scdino-trainer" --config "$work/hostile.yaml" >"$work/rank$1.out" 2>"$work/rank$1.err") &
  pids+=($!)
}
# A client that sends one byte of a store message and then nothing, the
# connection held open for SECONDS.
half_sent() {  # SECONDS
  $py - "$port" "$1" <<'PY' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.send(b"\x00")
time.sleep(float(sys.argv[2]))
PY
  pids+=($!)
}

# 1. Rank 0 alone, its store up; the forger and the half-sent message; then rank 1.
start_rank 0
rank0=${pids[-1]}
for _ in $(seq 1 300); do
  $py -c "import socket,sys; socket.create_connection(('127.0.0.1', $port), timeout=1)" 2>/dev/null && break
  kill -0 "$rank0" 2>/dev/null || fail "rank 0 ended before its store listened"
  sleep 0.1
done
$py - "$port" <<'PY' || fail "the forger could not write to rank 0's store (the test's premise)"
import datetime, sys
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), None, False, datetime.timedelta(seconds=10), False)
for key in ("scdino-rundir/1", "scdino-marks/1", "1", "rank1", "scdino-rendezvous"):
    store.set(key, "z" * 32)
PY
half_sent 40
sleep 0.3
start_rank 1
rank1=${pids[-1]}
for _ in $(seq 1 300); do
  [ -f "$run/endpoints/trainer.json" ] && break
  kill -0 "$rank0" 2>/dev/null && kill -0 "$rank1" 2>/dev/null || fail "a rank ended during the rendezvous"
  sleep 0.2
done
[ -f "$run/endpoints/trainer.json" ] || fail "no control endpoint within 60 s of the rendezvous"
"$ctl" pause --run-dir "$run" >/dev/null || fail "scdinoctl pause failed"
echo "ok: the ranks met despite forged marks and a half-sent store message; paused for the flood"

# 2. Paused (so the flood meets a live run), then the flood.
half_sent 30
$py - "$run" > "$work/flood.out" 2>&1 <<'PY' &
import json, sys, time
import grpc
run = sys.argv[1]
ep = json.load(open(run + "/endpoints/trainer.json"))
creds = grpc.ssl_channel_credentials(open(ep["tls_cert"], "rb").read())
token = [("authorization", "Bearer " + open(run + "/control.token").read().strip())]
calls = []
for c in range(50):
    ch = grpc.secure_channel(f'{ep["host"]}:{ep["port"]}', creds,
                             options=[("grpc.ssl_target_name_override", ep["tls_name"])])
    watch = ch.unary_stream("/scdino.v1.Control/WatchStatus", request_serializer=lambda m: m,
                            response_deserializer=lambda b: b)
    for i in range(60):
        calls.append(watch(b"", metadata=token if c % 2 else None, timeout=60))
print(f"opened {len(calls)}", flush=True)
time.sleep(12)
codes = {}
for call in calls:
    code = call.code() if call.done() else None
    codes[code.name if code else "open"] = codes.get(code.name if code else "open", 0) + 1
    call.cancel()
print("codes", json.dumps(codes), flush=True)
PY
flood=$!
pids+=($flood)
for _ in $(seq 1 1200); do grep -q "^opened" "$work/flood.out" && break; sleep 0.1; done
grep -q "^opened 3000" "$work/flood.out" || fail "the flood did not open its 3,000 streams: $(cat "$work/flood.out")"
"$ctl" status --run-dir "$run" --json > "$work/status.json" || fail "scdinoctl status did not answer during the flood"
grep -Eq "RUN_STATE_PAUS(ED|ING)" "$work/status.json" || fail "status during the flood: $(cat "$work/status.json")"
wait "$flood"
codes=$(sed -n 's/^codes //p' "$work/flood.out")
$py - "$codes" <<'PY' || fail "the flood's streams: $codes (expected 1,500 UNAUTHENTICATED, the rest served or RESOURCE_EXHAUSTED)"
import json, sys
c = json.loads(sys.argv[1])
assert c.get("UNAUTHENTICATED") == 1500, c
assert c.get("RESOURCE_EXHAUSTED", 0) >= 1400, c
assert sum(c.values()) == 3000, c
PY
echo "ok: 3,000 idle streams during training ($codes); scdinoctl status answered meanwhile"

# 3. Resumed, the run finishes as it would have: exit 0 on both ranks.
"$ctl" resume --run-dir "$run" >/dev/null || fail "scdinoctl resume failed"
for r in 0 1; do
  p=$([ $r = 0 ] && echo "$rank0" || echo "$rank1")
  for _ in $(seq 1 1200); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$p" 2>/dev/null && fail "rank $r still runs 120 s after the resume"
  wait "$p"
  rc=$?
  [ "$rc" = 0 ] || fail "rank $r exited $rc after the hostile peers (expected 0)"
done
grep -q "scdino-trainer: done, 1200 iterations" "$work/rank0.err" && [ -f "$run/checkpoint.safetensors" ] ||
  fail "the run did not finish its 1200 iterations with a checkpoint"
echo "ok: both ranks exited 0 after all 1200 iterations, checkpoint written"
