#!/usr/bin/env bash
# Planted endpoint files against scdinoctl. A real gRPC peer (Python's
# grpcio) listens and records the metadata of every call it gets; endpoint
# files in a run directory point at it in every way an attacker who can
# write there could try. scdinoctl must refuse each one, and the peer must
# receive nothing: no call, no token, no content of the user's files. As a
# control, the peer does record a call when the user names it with --target.
#   tests/control/planted_endpoint_test.sh BUILD_DIR
set -euo pipefail
build=$1
ctl="$build/services/ctl/scdinoctl"
work="$build/test-scratch/planted-endpoint"
rm -rf "$work"
mkdir -p "$work/run/endpoints" "$work/home/.ssh"
log="$work/peer.log"
: > "$log"

cat > "$work/peer.py" <<'PY'
import json, sys, threading
from concurrent import futures
import grpc

log = sys.argv[1]

class Recorder(grpc.GenericRpcHandler):
    def service(self, details):
        with open(log, "a") as f:
            f.write(json.dumps({"method": details.method, "metadata": [list(m) for m in details.invocation_metadata]}) + "\n")
        return None  # UNIMPLEMENTED to the caller

server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
server.add_generic_rpc_handlers([Recorder()])
if len(sys.argv) > 3:  # a TLS listener with a key and certificate of its own
    creds = grpc.ssl_server_credentials([(open(sys.argv[3], "rb").read(), open(sys.argv[2], "rb").read())])
    port = server.add_secure_port("127.0.0.1:0", creds)
else:
    port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
threading.Event().wait(120)
PY
/usr/bin/python3 "$work/peer.py" "$log" > "$work/peer.port" &
peer=$!
trap 'kill $peer 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do [ -s "$work/peer.port" ] && break; sleep 0.1; done
port=$(cat "$work/peer.port")
[ -n "$port" ] || { echo "FAIL: the recording peer did not start"; exit 1; }

secret="$work/home/.ssh/id_ed25519"
echo "-----BEGIN OPENSSH PRIVATE KEY----- very-secret-key-material" > "$secret"
chmod 600 "$secret"
endpoint="$work/run/endpoints/trainer.json"
plant() {  # extra JSON fields of the planted endpoint
  rm -f "$endpoint"
  cat > "$endpoint" <<JSON
{"service": "trainer", "host": "127.0.0.1", "port": $port, "pid": 1, "start_unix_ms": 0, "tls": false,
 "run_dir": "$work/run" $1}
JSON
  chmod 644 "$endpoint"
}
refused() {  # description, then scdinoctl arguments
  local what=$1
  shift
  if "$ctl" status "$@" > "$work/out" 2>&1; then
    echo "FAIL: $what: scdinoctl succeeded"; cat "$work/out"; exit 1
  fi
  [ ! -s "$log" ] || { echo "FAIL: $what: the planted peer was called:"; cat "$log"; exit 1; }
  echo "ok: $what: $(head -1 "$work/out")"
}

# 1. The old hole: an endpoint naming the user's private key as the token file.
plant ", \"token_file\": \"$secret\""
refused "endpoint naming a private file as the token, no token in the run" --run-dir "$work/run"

# 2. The run's real token is there, the endpoint points elsewhere without a
#    valid proof (a planted file, or a real one edited).
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/run/control.token"
chmod 600 "$work/run/control.token"
plant ", \"proof\": \"$(printf '0%.0s' $(seq 1 64))\""
refused "endpoint with a forged proof" --run-dir "$work/run"
plant ""
refused "endpoint without a proof" --run-dir "$work/run"

# 3. An endpoint file others can write, and one that is a symlink.
plant ", \"proof\": \"x\""
chmod 666 "$endpoint"
refused "endpoint writable by others" --run-dir "$work/run"
plant ""
mv "$endpoint" "$work/elsewhere.json"
ln -s "$work/elsewhere.json" "$endpoint"
refused "endpoint that is a symlink" --run-dir "$work/run"

# 4. A token that is a symlink to the private key, with --target as well.
ln -sf "$secret" "$work/run/link.token"
refused "token file that is a symlink" --target "127.0.0.1:$port" --token-file "$work/run/link.token"
chmod 644 "$work/run/control.token"
refused "token file readable by others" --target "127.0.0.1:$port" --token-file "$work/run/control.token"
chmod 600 "$work/run/control.token"

# Control: a target the user names does get the call (and the token).
"$ctl" status --target "127.0.0.1:$port" --token-file "$work/run/control.token" > "$work/out" 2>&1 && rc=0 || rc=$?
[ "$rc" = 5 ] || { echo "FAIL: expected exit 5 (UNIMPLEMENTED) from the named peer, got $rc"; cat "$work/out"; exit 1; }
grep -q "scdino.v1.Control/GetStatus" "$log" || { echo "FAIL: the recording peer saw no call"; exit 1; }
grep -q "Bearer $(cat "$work/run/control.token")" "$log" || { echo "FAIL: the recorder does not see metadata"; exit 1; }
! grep -q "very-secret" "$log" || { echo "FAIL: the private key reached the peer"; exit 1; }
echo "ok: a target the user names is called (the recorder works)"

# 5. Endpoints the run really wrote (valid proofs), left behind by a run that
# was killed, whose port another user now holds. TLS (the default): the
# client pins the run's certificate, so neither a plaintext listener nor a
# TLS listener with a key of its own gets a call. Plaintext on this host:
# the writer's process is gone, so the file is stale and nothing is sent.
: > "$log"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=trainer.scdino.invalid \
  -addext subjectAltName=DNS:trainer.scdino.invalid -keyout "$work/run.key" -out "$work/run.crt" 2>/dev/null
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=trainer.scdino.invalid \
  -addext subjectAltName=DNS:trainer.scdino.invalid -keyout "$work/other.key" -out "$work/other.crt" 2>/dev/null
/usr/bin/python3 "$work/peer.py" "$log" "$work/other.crt" "$work/other.key" > "$work/tls-peer.port" &
tls_peer=$!
trap 'kill $peer $tls_peer 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do [ -s "$work/tls-peer.port" ] && break; sleep 0.1; done
tls_port=$(cat "$work/tls-peer.port")
fingerprint="sha256:$(openssl x509 -in "$work/run.crt" -outform DER | sha256sum | cut -d' ' -f1)"
dead_pid=$(bash -c 'echo $$')
signed() {  # host port pid tls(true|false): an endpoint with the proof the run's token gives
  /usr/bin/python3 - "$work/run" "$1" "$2" "$3" "$4" "$work/run.crt" "$fingerprint" > "$endpoint" <<'PY'
import hashlib, hmac, json, os, sys
run, host, port, pid, tls, cert, fp = sys.argv[1:]
tls = tls == "true"
e = {"service": "trainer", "host": host, "port": int(port), "pid": int(pid), "start_unix_ms": 1, "tls": tls,
     "tls_cert": cert if tls else "", "tls_fingerprint": fp if tls else "", "tls_name": "trainer.scdino.invalid" if tls else "",
     "pid_namespace": os.readlink("/proc/self/ns/pid"), "process_start": "12345", "run_dir": run}
msg = "\n".join(["scdino-endpoint-v2", e["service"], host, port, pid, "1", "tls" if tls else "plaintext", e["tls_cert"],
                 e["tls_fingerprint"], e["tls_name"], e["pid_namespace"], e["process_start"], run])
token = open(run + "/control.token").read().strip()
e["proof"] = hmac.new(token.encode(), msg.encode(), hashlib.sha256).hexdigest()
print(json.dumps(e))
PY
  chmod 644 "$endpoint"
}
rm -f "$endpoint"
signed 127.0.0.1 "$port" 1 true
refused "TLS endpoint of a killed run, a plaintext listener on its port" --run-dir "$work/run" --timeout 3
signed 127.0.0.1 "$tls_port" 1 true
refused "TLS endpoint of a killed run, a TLS listener with another key on its port" --run-dir "$work/run" --timeout 3
signed "$(hostname)" "$port" "$dead_pid" false
refused "plaintext endpoint of a process that has ended, on this host" --run-dir "$work/run"
grep -q "stale endpoint file: the trainer process $dead_pid" "$work/out" || { echo "FAIL: not named stale:"; cat "$work/out"; exit 1; }
# Control: the TLS listener does take calls from a client that trusts it.
"$ctl" status --target "127.0.0.1:$tls_port" --token-file "$work/run/control.token" --tls --tls-ca "$work/other.crt" \
  --tls-name trainer.scdino.invalid > "$work/out" 2>&1 && rc=0 || rc=$?
[ "$rc" = 5 ] && grep -q "scdino.v1.Control/GetStatus" "$log" || { echo "FAIL: the TLS recorder saw no call ($rc)"; cat "$work/out"; exit 1; }
echo "ok: the TLS recorder is called by a client that trusts its certificate"
