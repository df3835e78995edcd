#!/usr/bin/env bash
# The services in the CPU image (containers/Dockerfile), built with podman:
#
#   image     scripts/build-image.sh --prebuilt (the binaries of this build in
#             the Dockerfile's runtime stage) and --oci-bundle; what the image
#             holds and what it must not hold; every binary starts in it.
#   services  scdino-synth, scdino-trainer (one epoch, then driven from the
#             host with scdinoctl: status, pause, resume, stop), scdino-features
#             and scdino-eval in the image on data mounted from the host;
#             the file_sd target written inside is valid on the host.
#   slurm     deploy/slurm/train.sbatch with SCDINO_CONTAINER=<OCI bundle>:
#             Slurm's own srun --container through runc (oci.conf of
#             scripts/slurm-local.sh); the bad inputs of lib.sh's container
#             arguments (missing image, unreadable mount, config outside the
#             mounts, several tasks on a bundle) and the Pyxis flags it makes.
#
#   bash tests/deploy/container_test.sh SOURCE_DIR BUILD_DIR image|services|slurm
# Lines starting with FAIL: fail the ctest.
set -uo pipefail
phase=${3:?usage: container_test.sh SOURCE_DIR BUILD_DIR image|services|slurm}
source "$(dirname "$0")/../support/lib.sh" "container-$phase" "$1" "$2"
source "$src/containers/engine.sh"
scdino_engine_init || { echo "FAIL: no container engine"; exit 1; }
engine=$scdino_engine
image=localhost/scdino:test
# The bundle lives beside the scratch directories of the phases and mounts
# them all (at the same paths), so a job in any of them finds its files.
scratch="$build/test-scratch"
bundle="$scratch/container-bundle"
fail() { echo "FAIL: $*"; exit 1; }
# Enroot's temporary containers (enroot.<random>) made since BEFORE (an
# earlier list): a run of this test that was killed may have left its own,
# which are not this run's to judge.
new_enroot_containers() {
  comm -13 <(sort <<<"$1") <("$engine" ps -a --format '{{.Names}}' | grep '^enroot\.' | sort) | sed '/^$/d'
}
run_in() {  # run_in ARGS... : a command in the image, $scratch mounted, host network
  "$engine" run --rm "${scdino_engine_flags[@]}" --network host -v "$scratch:$scratch" -w "$work" "$image" "$@"
}

case $phase in
image)
  # Refused before anything is built, each saying what to do. A machine
  # without enroot is made by leaving it off PATH (a head node has it).
  err=$(env PATH="$(path_without enroot)" bash "$src/scripts/build-image.sh" --sqsh "$work/x.sqsh" 2>&1) &&
    fail "--sqsh without enroot was accepted"
  grep -qF "needs enroot" <<<"$err" && grep -qF "enroot import -o $work/x.sqsh ${engine/docker/dockerd}://localhost/scdino:cpu" <<<"$err" ||
    fail "--sqsh without enroot: $err"
  err=$(bash "$src/scripts/build-image.sh" --prebuilt "$work" 2>&1) && fail "--prebuilt of a non-build directory was accepted"
  grep -qF "$work is not a CMake build directory" <<<"$err" || fail "--prebuilt: $err"
  err=$(bash "$src/scripts/build-image.sh" --cuda --cudnn bogus 2>&1) && fail "--cudnn bogus was accepted"
  grep -qF -- "--cudnn bogus: expected stub, download or archive=FILE" <<<"$err" || fail "--cudnn bogus: $err"
  err=$(bash "$src/scripts/build-image.sh" --cuda --cudnn "archive=$work/none.tar.xz" 2>&1) && fail "a missing cuDNN archive was accepted"
  grep -qF "no readable cuDNN archive $work/none.tar.xz" <<<"$err" || fail "missing cuDNN archive: $err"
  err=$(bash "$src/scripts/build-image.sh" --cuda-ngc --cudnn download 2>&1) && fail "--cudnn for the NGC image was accepted"
  grep -qF -- "--cudnn is for --cuda" <<<"$err" || fail "--cudnn with --cuda-ngc: $err"
  tools=$(mktemp -d)
  for t in dirname sed; do ln -s "$(command -v $t)" "$tools/$t"; done
  err=$(env PATH="$tools" /bin/bash "$src/scripts/build-image.sh" 2>&1) && fail "a build without any engine was accepted"
  rm -rf "$tools"
  grep -qF "install podman" <<<"$err" || fail "no engine: $err"
  # The GPU images (Debian's, built by the gpu-image test; NGC's, not built
  # here) install what the CPU image does, and insist on CUDA; they also
  # compile every benchmark against their LibTorch (not installed). Their
  # install tree is /opt/scdino/install (the compiling stage keeps its
  # sources and build tree beside it), the CPU image's /opt/scdino.
  targets() { grep -oE -- 'cmake --install [^ ]+ --prefix [^ ]+|COPY --from=binaries [^ ]+ [^ ]+' "$1" |
              sed -e 's/--install [^ ]*/--install BUILD/' -e 's|/opt/scdino/install|/opt/scdino|g' | sort; }
  for f in Dockerfile.cuda Dockerfile.cuda-ngc; do
    [ "$(targets "$src/containers/Dockerfile")" = "$(targets "$src/containers/$f")" ] ||
      fail "containers/$f installs other targets than containers/Dockerfile"
    grep -q -- "-DSCDINO_BUILD_BENCH=ON" "$src/containers/$f" && grep -q "scdino_benchmarks" "$src/containers/$f" ||
      fail "containers/$f does not compile the benchmarks against its LibTorch"
    grep -q -- "-DSCDINO_REQUIRE_CUDA=ON" "$src/containers/$f" || fail "containers/$f does not require CUDA at configure"
  done
  echo "ok: build-image.sh refuses --sqsh without enroot, a non-build --prebuilt, a bad --cudnn, no engine; the three Dockerfiles install the same tree"

  rm -rf "$bundle"
  enroot_before=$("$engine" ps -a --format '{{.Names}}' | grep '^enroot\.')
  # --sqsh on a podman-only host: Enroot (here its stand-in, which needs
  # `docker` in its exit trap as the real one does) and no docker on PATH.
  enroot_path="$src/tests/support/fake-enroot:$(path_without docker enroot)"
  out=$(env PATH="$enroot_path" bash "$src/scripts/build-image.sh" --prebuilt "$build" --tag scdino:test \
          --oci-bundle "$bundle" --mounts "$scratch" --sqsh "$work/scdino.sqsh" 2>"$work/build.err") ||
    { tail -30 "$work/build.err"; fail "scripts/build-image.sh failed"; }
  echo "$out"
  grep -q "^scdino: built $image in [0-9]*s, [0-9]* MB" <<<"$out" || fail "no build time and size line"
  grep -qE "^scdino: $work/scdino.sqsh: [0-9]+ bytes, inodes [0-9]+; /usr/local/bin: .*scdino-trainer" <<<"$out" ||
    fail "no checked .sqsh: $out $(tail -5 "$work/build.err")"
  grep -qF "scdino: $work/scdino.sqsh ready for srun --container-image=$work/scdino.sqsh" <<<"$out" || fail "no ready line: $out"
  unsquashfs -l "$work/scdino.sqsh" /usr/local/bin/scdino-trainer | grep -q scdino-trainer || fail "the .sqsh lacks the trainer"
  [ -z "$(new_enroot_containers "$enroot_before")" ] || fail "enroot import left a container behind: $(new_enroot_containers "$enroot_before")"
  # The same with a docker client that has no daemon (this machine's).
  echo '#!/bin/sh
echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2; exit 1' > "$work/docker"
  chmod +x "$work/docker"
  rm -f "$work/scdino.sqsh"
  env PATH="$work:$enroot_path" bash "$src/scripts/build-image.sh" --prebuilt "$build" --tag scdino:test \
    --sqsh "$work/scdino.sqsh" >"$work/daemonless.out" 2>&1 || { tail -5 "$work/daemonless.out"; fail "--sqsh with a daemonless docker client"; }
  rm -f "$work/docker" "$work/scdino.sqsh"
  # A failing import: a non-zero exit that says what failed, no file, no container.
  err=$(env PATH="$enroot_path" FAKE_ENROOT_FAIL=1 bash "$src/scripts/build-image.sh" --prebuilt "$build" --tag scdino:test \
          --sqsh "$work/failed.sqsh" 2>&1) && fail "a failed enroot import exited 0"
  grep -qF "'enroot import -o $work/failed.sqsh podman://$image' failed (exit 1)" <<<"$err" || fail "failed import: $err"
  [ ! -e "$work/failed.sqsh" ] || fail "a failed import left $work/failed.sqsh"
  [ -z "$(new_enroot_containers "$enroot_before")" ] || fail "a failed enroot import left a container behind: $(new_enroot_containers "$enroot_before")"
  echo "ok: --sqsh with podman only (Enroot's docker cleanup), with a daemonless docker client, and a failed import"
  # Labels: version, revision, source.
  labels=$("$engine" image inspect --format '{{json .Labels}}' "$image")
  for l in version revision source; do
    $py -c "import json,sys; v=json.loads(sys.argv[1])['org.opencontainers.image.$l']; assert v and v!='unknown', v" "$labels" ||
      fail "label org.opencontainers.image.$l missing: $labels"
  done
  # This checkout's commit, even where every layer came from an earlier
  # commit's build (buildah reuses a cached LABEL step whose ARG changed).
  if want=$(git -C "$src" rev-parse HEAD 2>/dev/null); then
    $py -c "import json,sys; v=json.loads(sys.argv[1])['org.opencontainers.image.revision']; assert v.split('-')[0]==sys.argv[2], v" \
      "$labels" "$want" || fail "label org.opencontainers.image.revision is not this checkout's $want: $labels"
  fi
  # What the runtime image holds, and what it must not.
  listing=$(run_in sh -c 'ls /usr/local/bin /usr/local/share/scdino/configs;
    for p in gcc g++ c++ cc cmake ninja ld; do command -v $p; done;
    ls -d /usr/include/torch /usr/include/grpc++ /opt/scdino /usr/local/include/* 2>/dev/null;
    find / -xdev \( -name "*_test" -o -name "*.cc" -o -name CMakeCache.txt \) -not -path "/proc/*" 2>/dev/null | head' 2>&1)
  for b in scdino-trainer scdino-features scdino-eval scdino-preflight scdinoctl scdino-synth scdino-stats scdino-pack scdino-config scdino-export \
           scdino-convert-checkpoint scdino-gpu-check small-data.yaml; do
    grep -qx "$b" <<<"$listing" || fail "the image lacks $b: $listing"
  done
  leftovers=$(grep -vxE 'scdino-[a-z-]+|scdinoctl|[a-z-]+\.yaml|/usr/local/bin:|/usr/local/share/scdino/configs:|' <<<"$listing")
  [ -z "$leftovers" ] || fail "the runtime image holds build tools, headers, sources or tests: $leftovers"
  # Every binary starts (its shared libraries are all in the image).
  for b in scdino-trainer scdino-features scdino-eval scdino-preflight scdinoctl scdino-synth scdino-stats scdino-pack scdino-config scdino-export; do
    v=$(run_in "$b" --version 2>&1) || fail "$b --version failed in the image: $v"
  done
  run_in scdino-convert-checkpoint --help >/dev/null 2>&1 || fail "scdino-convert-checkpoint (python3-torch) does not start"
  blas=$(run_in readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>&1)
  grep -q openblas <<<"$blas" || fail "LibTorch in the image gets $blas, not OpenBLAS"
  [ -f "$bundle/config.json" ] && [ -x "$bundle/rootfs/usr/local/bin/scdino-trainer" ] || fail "no OCI bundle at $bundle"
  $py -c "import json,sys; json.load(open(sys.argv[1]))" "$bundle/config.json" || fail "the bundle's config.json is not JSON"
  echo "ok: image $image: labels, runtime tree only, every binary starts; OCI bundle $bundle"
  ;;

services)
  scdino_image_exists "$image" || fail "no image $image (the image phase makes it)"
  run_in scdino-synth --out "$work/cells" --classes 2 --per-class 40 --channels 3 --size 16 --seed 2 >/dev/null ||
    fail "scdino-synth in the image failed"
  [ "$(find "$work/cells" -name '*.tif*' | wc -l)" = 80 ] || fail "scdino-synth wrote no 80 TIFFs to the mounted directory"
  write_config() {  # write_config NAME EPOCHS EXTRA-SCDINO-LINES
    cat > "$work/$1.yaml" <<YAML
meta: {name_of_run: $1, output_dir: "$work", dataset_dir: "$work/cells", seed: 5,
       selected_channel_combination_per_run: ["012"]}
train_scDINO:
  epochs: $2
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
downstream_analyses:
  compute_cls_features: {resize_length: 16}
  kNN: {global: {n_neighbors: [5], temperature: 0.07}}
scdino:
  threads: 1
  evaluation: {tsne: false, umap: false}
$3
YAML
  }
  # One epoch, then features and evaluation of its checkpoint, all in the image.
  write_config boxed 1 ""
  run_in scdino-trainer --config "$work/boxed.yaml" >/dev/null 2>"$work/train.err" ||
    { tail "$work/train.err"; fail "scdino-trainer in the image failed"; }
  [ -f "$work/boxed/checkpoint.safetensors" ] || fail "no checkpoint from the trainer in the image"
  run_in scdino-features --config "$work/boxed.yaml" >/dev/null 2>"$work/features.err" ||
    { tail "$work/features.err"; fail "scdino-features in the image failed"; }
  run_in scdino-eval --config "$work/boxed.yaml" >/dev/null 2>"$work/eval.err" || { tail "$work/eval.err"; fail "scdino-eval in the image failed"; }
  $py - "$work/boxed" <<'PY' || fail "features or evaluation of the containerised run"
import glob, json, os, sys
import numpy as np
run = sys.argv[1]
x = np.load(os.path.join(run, "features", "checkpoint", "features.npy"))
assert x.shape == (80, 32), x.shape
r = json.load(open(os.path.join(run, "eval", "checkpoint", "knn_results.json")))
assert r, r
PY
  echo "ok: in the image: scdino-synth (80 TIFFs), scdino-trainer (1 epoch), scdino-features, scdino-eval"
  # Enroot's PyTorch hook gives every step of a job RANK, WORLD_SIZE and the
  # same MASTER_PORT: a one-process scdino-features beside the trainer's
  # rank 0 must not try to serve a store on that port (here: in use).
  $py -c 'import socket, sys, time
s = socket.socket(); s.bind(("0.0.0.0", 0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(120)' \
    > "$work/port.txt" &
  holder=$!
  for _ in $(seq 1 50); do [ -s "$work/port.txt" ] && break; sleep 0.1; done
  run_in env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT="$(cat "$work/port.txt")" \
    scdino-features --config "$work/boxed.yaml" --random-init >/dev/null 2>"$work/hook.err" ||
    { kill $holder; tail -3 "$work/hook.err"; fail "scdino-features under the PyTorch hook's variables failed"; }
  kill $holder
  echo "ok: scdino-features with RANK=0 WORLD_SIZE=1 and a MASTER_PORT in use (Enroot's PyTorch hook) runs"

  # A long run driven from the host through its control API.
  write_config ctl 100000 '  control: {listen: "127.0.0.1:0"}
  metrics: {listen: 127.0.0.1, file_sd_dir: "'"$work"'/targets"}'
  run="$work/ctl"
  "$engine" run --rm "${scdino_engine_flags[@]}" --network host --name scdino-test-trainer \
    -v "$scratch:$scratch" -w "$work" "$image" scdino-trainer --config "$work/ctl.yaml" >"$work/trainer.out" 2>"$work/trainer.err" &
  pid=$!
  trap '"$engine" rm -f scdino-test-trainer >/dev/null 2>&1' EXIT
  for _ in $(seq 1 300); do
    [ -f "$run/endpoints/trainer.json" ] && [ -n "$(ls "$work"/targets/*.json 2>/dev/null)" ] && break
    kill -0 $pid 2>/dev/null || { tail "$work/trainer.err"; fail "the containerised trainer ended early"; }
    sleep 0.2
  done
  [ -f "$run/endpoints/trainer.json" ] || { tail "$work/trainer.err"; fail "the containerised trainer wrote no endpoint file"; }
  state() { "$ctl" status --run-dir "$run" --json | $py -c 'import json,sys; print(json.load(sys.stdin)["state"])'; }
  iteration() { "$ctl" status --run-dir "$run" --json | $py -c 'import json,sys; print(json.load(sys.stdin)["progress"]["iteration"])'; }
  case $(state) in RUN_STATE_RUNNING|RUN_STATE_CHECKPOINTING|RUN_STATE_STARTING) ;; *) fail "scdinoctl status from the host: $(state)" ;; esac
  "$ctl" pause --run-dir "$run" >/dev/null || fail "scdinoctl pause failed"
  for _ in $(seq 1 100); do [ "$(state)" = RUN_STATE_PAUSED ] && break; sleep 0.1; done
  [ "$(state)" = RUN_STATE_PAUSED ] || fail "not PAUSED after scdinoctl pause"
  a=$(iteration); sleep 1.5; b=$(iteration)
  [ "$a" = "$b" ] || fail "the containerised trainer moved while paused: $a -> $b"
  "$ctl" resume --run-dir "$run" >/dev/null || fail "scdinoctl resume failed"
  sleep 1; c=$(iteration)
  [ "$c" -gt "$b" ] || fail "no progress after resume: $b -> $c"
  echo "ok: scdinoctl on the host: status, pause (iteration $a = $b), resume ($b -> $c)"
  # The file_sd target written inside the container: accepted by
  # Prometheus' own checker, naming an address the host can scrape.
  target_file=$(ls "$work"/targets/*.json)
  sed -e "s|- /shared/scdino/runs/prometheus_targets/\*.json|- $work/targets/*.json|" \
    "$src/monitoring/prometheus/prometheus.yml" > "$work/prometheus.yml"
  cp "$src/monitoring/prometheus/"scdino-*.yml "$work/"
  grep -qF "$work/targets" "$work/prometheus.yml" || fail "could not point the Prometheus config at $work/targets"
  promtool check config "$work/prometheus.yml" >"$work/promtool.out" 2>&1 ||
    { cat "$work/promtool.out"; fail "promtool rejects the config with the container's target file"; }
  $py - "$target_file" <<'PY' || fail "the metrics target written in the container is not scrapable from the host"
import json, sys, urllib.request
t = json.load(open(sys.argv[1]))[0]
text = urllib.request.urlopen("http://%s/metrics" % t["targets"][0], timeout=5).read().decode()
assert "scdino_trainer_iterations_total" in text
assert t["labels"]["run"] == "ctl", t
PY
  echo "ok: file_sd target $(basename "$target_file") valid on the host (promtool, scraped)"
  "$ctl" stop --run-dir "$run" >/dev/null || fail "scdinoctl stop failed"
  wait $pid; rc=$?
  [ "$rc" = 4 ] || { tail "$work/trainer.err"; fail "the containerised trainer exited $rc after stop, expected 4"; }
  [ -f "$run/checkpoint.safetensors" ] || fail "no checkpoint after the stop"
  echo "ok: stopped from the host: exit 4, checkpoint written"
  ;;

slurm)
  [ -f "$bundle/config.json" ] || fail "no OCI bundle at $bundle (the image phase makes it)"
  sinfo -h >/dev/null 2>&1 || fail "no Slurm (scripts/slurm-local.sh)"
  "$build/services/tools/scdino-synth" --out "$work/cells" --classes 2 --per-class 12 --channels 3 --size 16 --seed 3 >/dev/null
  cat > "$work/run.yaml" <<YAML
meta: {name_of_run: oci, output_dir: "$work", dataset_dir: "$work/cells", seed: 5,
       selected_channel_combination_per_run: ["012"]}
train_scDINO:
  epochs: 1
  batch_size_per_gpu: 4
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
scdino: {threads: 1}
YAML
  cd "$work"
  # Held at first: the image's watch from this node (deploy/slurm/scdinoctl.sh
  # with the bundle: a job step whose squeue this node answers through a
  # folder in the run's parent) waits while it is queued, then follows it.
  job=$(sbatch --parsable --hold --ntasks=1 --cpus-per-task=1 --output="$work/train-%j.out" \
    --export=ALL,SCDINO_CONTAINER="$bundle" "$src/deploy/slurm/train.sbatch" "$work/run.yaml") || fail "sbatch failed"
  timeout 400 bash "$src/deploy/slurm/scdinoctl.sh" --image "$bundle" --mount "$work" \
    watch --job "$job" --run-dir "$work/oci" > "$work/watch.out" 2>&1 &
  watch_pid=$!
  for _ in $(seq 1 60); do grep -q "waiting while Slurm job $job is queued" "$work/watch.out" && break; sleep 1; done
  grep -q "waiting while Slurm job $job is queued" "$work/watch.out" && ls -d "$work"/.scdino-squeue.* >/dev/null ||
    { cat "$work/watch.out"; fail "the bundle's watch did not wait for the held job $job through a relay in $work"; }
  scontrol release "$job" || fail "scontrol release $job failed"
  for _ in $(seq 1 300); do squeue -h -j "$job" 2>/dev/null | grep -q . || break; sleep 1; done
  wait "$watch_pid" && rc=0 || rc=$?
  [ "$rc" = 0 ] && grep -q COMPLETED "$work/watch.out" || { cat "$work/watch.out"; fail "the bundle's watch exited $rc"; }
  ! ls -d "$work"/.scdino-squeue.* 2>/dev/null || fail "the watch left its relay folder in $work"
  echo "ok: the image's watch from this node, a job step in the OCI bundle, waited for the held job and followed it to COMPLETED"
  # With an image reference the step is Pyxis's (not on this machine: an
  # srun on PATH records its flags and environment, then runs the host's
  # scdinoctl as the container would, with no squeue on its PATH): no GPU
  # asked, the run's folder mounted, the relay's squeue passed in; a
  # cancelled job ends the watch.
  mkdir -p "$work/ref-srun"
  cat > "$work/ref-srun/srun" <<SH
#!/bin/bash
echo "NVIDIA_VISIBLE_DEVICES=\$NVIDIA_VISIBLE_DEVICES \$*" > "$work/ref-srun/call"
while [[ \$1 == -* ]]; do shift; done
shift
PATH="$(path_without squeue)" exec "$build/services/ctl/scdinoctl" "\$@"
SH
  chmod +x "$work/ref-srun/srun"
  held=$(sbatch --parsable --hold --job-name=held --output=/dev/null --wrap true) || fail "sbatch --hold failed"
  PATH="$work/ref-srun:$PATH" timeout 120 bash "$src/deploy/slurm/scdinoctl.sh" --image nvcr.io#scdino/cuda:1 \
    --mount "$work" watch --job "$held" --run-dir "$work/held" > "$work/ref-watch.out" 2>&1 &
  watch_pid=$!
  for _ in $(seq 1 60); do grep -q "waiting while Slurm job $held is queued" "$work/ref-watch.out" && break; sleep 1; done
  scancel "$held"
  wait "$watch_pid" && rc=0 || rc=$?
  call=$(cat "$work/ref-srun/call" 2>/dev/null)
  [ "$rc" = 1 ] && grep -q "waiting while Slurm job $held is queued" "$work/ref-watch.out" &&
    grep -q "job $held left the queue" "$work/ref-watch.out" ||
    { cat "$work/ref-watch.out"; fail "the watch of an image reference exited $rc"; }
  for want in "NVIDIA_VISIBLE_DEVICES=void " " --container-image=nvcr.io#scdino/cuda:1 " " --container-mounts=$work:$work " \
              " --container-env=NVIDIA_VISIBLE_DEVICES,SCDINO_SQUEUE " " --ntasks=1 "; do
    grep -qF -- "$want" <<<"$call" || fail "the reference's watch step lacks '$want': $call"
  done
  ! grep -q -- "--gpus\|--gres" <<<"$call" || fail "the watch step asks for a GPU: $call"
  echo "ok: with an image reference, the watch is a Pyxis step with no GPU whose squeue this node answers; a cancelled job ends it (exit 1)"
  out=$(cat "$work"/train-*.out)
  [ -f "$work/oci/checkpoint.safetensors" ] || { echo "$out"; tail -20 /var/log/slurm/slurmd.log; fail "no checkpoint from the job in the OCI bundle"; }
  $py - "$work/oci/checkpoint.safetensors" <<'PY' || { echo "$out"; fail "the containerised job did not train its epoch"; }
import json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
assert int(json.loads(b[8:8 + n])["__metadata__"]["iteration"]) > 0
PY
  echo "ok: train.sbatch with SCDINO_CONTAINER=<OCI bundle>: srun --container through runc trained 1 epoch"

  # lib.sh's container arguments: the flags it makes and the bad inputs it
  # refuses, each naming the path.
  args() {  # args CONFIG NAME ENV... : container_args one per line, or the error
    local config=$1 name=$2
    shift 2
    (cd "$work" && env SCDINO_CONFIG_TOOL="$build/services/tools/scdino-config" "$@" \
       bash -c 'source "$0"; scdino_container_args "$1" "$2" && printf "%s\n" "${container_args[@]}"' \
      "$src/deploy/slurm/lib.sh" "$config" "$name" 2>&1)
  }
  # Least privilege: the working directory (and the config in it) and a data
  # set outside it are mounted read-only, the output directory inside the
  # working directory read-write over it, the file_sd directory inside the
  # output directory needs no mount of its own, and a token file the config
  # names is mounted read-only; a relative image path becomes absolute.
  touch "$work/image.sqsh"
  data="$scratch/container-slurm-data"
  mkdir -p "$data" "$scratch/container-slurm-keys"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$scratch/container-slurm-keys/token"
  chmod 600 "$scratch/container-slurm-keys/token"
  sed -e "s|dataset_dir: \"$work/cells\"|dataset_dir: \"$data\"|" -e "s|output_dir: \"$work\"|output_dir: \"$work/pyxis-out\"|" \
      -e "s|^scdino: {threads: 1}|scdino: {threads: 1, control: {token_file: \"$scratch/container-slurm-keys/token\"}}|" \
      "$work/run.yaml" > "$work/pyxis.yaml"
  flags=$(args pyxis.yaml scdino-7 SCDINO_CONTAINER=image.sqsh SCDINO_CONTAINER_MOUNTS=/tmp:/scratch) ||
    fail "Pyxis flags: $flags"
  for want in "--container-image=$work/image.sqsh" "--container-workdir=$work" "--container-name=scdino-7" \
              "--no-container-mount-home"; do
    grep -qxF -- "$want" <<<"$flags" || fail "Pyxis flags lack $want: $flags"
  done
  mounts=$(sed -n 's/^--container-mounts=//p' <<<"$flags" | tr , '\n')
  want_mounts=$(printf '%s\n' "$work:$work:ro" "$data:$data:ro" "$scratch/container-slurm-keys/token:$scratch/container-slurm-keys/token:ro" \
                "$work/pyxis-out:$work/pyxis-out" "/tmp:/scratch")
  [ "$(sort <<<"$mounts")" = "$(sort <<<"$want_mounts")" ] || fail "Pyxis mounts: got
$mounts
expected
$want_mounts"
  [ "$(head -1 <<<"$mounts")" = "$work:$work:ro" ] || fail "the working directory must be mounted before the output directory inside it: $mounts"
  # An index CSV whose images lie outside its folder: each of their
  # folders is mounted read-only (one inside another needs no mount of its
  # own); past 64 folders it is refused naming the first image outside.
  csvs="$scratch/container-csv"
  rm -rf "$csvs"
  mkdir -p "$csvs/labels" "$csvs/plateA/w1/deeper" "$csvs/plateB"
  printf 'path,label\n%s,a\n%s,a\n../plateB/2.tif,b\nin.tif,a\n' "$csvs/plateA/w1/1.tif" "$csvs/plateA/w1/deeper/3.tif" \
    > "$csvs/labels/index.csv"
  sed "s|^scdino: {threads: 1}|scdino: {threads: 1, data_source: csv, index_csv: \"$csvs/labels/index.csv\"}|" \
    "$work/run.yaml" > "$work/csv.yaml"
  flags=$(args csv.yaml "" SCDINO_CONTAINER=image.sqsh) || fail "CSV flags: $flags"
  mounts=$(sed -n 's/^--container-mounts=//p' <<<"$flags" | tr , '\n')
  for want in "$csvs/labels:$csvs/labels:ro" "$csvs/plateA/w1:$csvs/plateA/w1:ro" "$csvs/plateB:$csvs/plateB:ro"; do
    grep -qxF -- "$want" <<<"$mounts" || fail "the CSV's image folders are not mounted ($want): $mounts"
  done
  ! grep -qF "deeper" <<<"$mounts" || fail "a folder inside a mounted one got a mount of its own: $mounts"
  # Through the image's own tool (Pyxis is not on this machine: an srun on
  # PATH runs the host's tool and records its flags): first without reading
  # the CSV, then with its folder mounted.
  mkdir -p "$work/pyxis-srun"
  cat > "$work/pyxis-srun/srun" <<SH
#!/bin/bash
echo "\$*" >> "$work/pyxis-srun/calls"
while [ \$# -gt 0 ]; do case \$1 in --*) shift ;; *) break ;; esac; done
[ "\$1" != true ] || exit "\${IMPORT_EXIT:-0}"
[ "\$1" = scdino-config ] || exit 0
shift
exec "$build/services/tools/scdino-config" "\$@"
SH
  chmod +x "$work/pyxis-srun/srun"
  rm -f "$work/pyxis-srun/calls"
  flags=$(cd "$work" && env PATH="$work/pyxis-srun:$(path_without scdino-config)" SCDINO_BIN="$work/no-build" \
            SCDINO_CONTAINER=image.sqsh \
            bash -c 'source "$0"; scdino_container_args "$1" scdino-9 && printf "%s\n" "${container_args[@]}"' \
            "$src/deploy/slurm/lib.sh" csv.yaml 2>&1) || fail "CSV flags through the image's tool: $flags"
  grep -qF -- "$csvs/plateB:$csvs/plateB:ro" <<<"$flags" || fail "CSV through the image's tool: $flags"
  calls=$(cat "$work/pyxis-srun/calls")
  # Named, the listing's steps import the container the job's steps share.
  [ "$(grep -c -- "--container-name=scdino-9 " <<<"$calls")" = 2 ] && grep -qxF -- "--container-name=scdino-9" <<<"$flags" ||
    fail "the image's listing and the job's steps should share the container scdino-9: $calls
$flags"
  [ "$(wc -l <<<"$calls")" = 2 ] && grep -q "scdino-config paths --shallow" <<<"$(head -1 <<<"$calls")" &&
    grep -qF ",$csvs/labels:$csvs/labels:ro " <<<"$(tail -1 <<<"$calls")" &&
    grep -qF "scdino-config paths $work/csv.yaml" <<<"$(tail -1 <<<"$calls")" ||
    fail "the image's tool was not asked shallow, then with the CSV's folder mounted: $calls"
  # Steps at once (train-and-evaluate.sbatch): one task a node imports the
  # named container before them; an unnamed one is not imported; a failed
  # import ends the job with its code.
  import_container() {  # import_container NAME ENV...: the output; the srun calls in $work/pyxis-srun/calls
    local name=$1
    shift
    rm -f "$work/pyxis-srun/calls"
    (cd "$work" && env PATH="$work/pyxis-srun:$(path_without scdino-config)" SCDINO_BIN="$work/no-build" \
       SCDINO_CONTAINER=image.sqsh SLURM_JOB_NUM_NODES=3 "$@" \
       bash -c 'source "$0"; scdino_container_args "$1" "$2" && scdino_container_import' \
       "$src/deploy/slurm/lib.sh" run.yaml "$name" 2>&1)
  }
  out=$(import_container scdino-9) || fail "importing the named container: $out"
  calls=$(grep -v "scdino-config paths" "$work/pyxis-srun/calls" || true)
  [ "$(wc -l <<<"$calls")" = 1 ] && grep -qF -- "--ntasks-per-node=1 --ntasks=3 " <<<"$calls" &&
    grep -qF -- "--container-name=scdino-9 " <<<"$calls" && grep -q " true$" <<<"$calls" &&
    grep -qF "container imported on 3 node(s)" <<<"$out" ||
    fail "the named container was not imported by one task a node: $calls
$out"
  out=$(import_container "") || fail "an unnamed container: $out"
  ! grep -v "scdino-config paths" "$work/pyxis-srun/calls" | grep -q . || fail "an unnamed container was imported: $out"
  rc=0; out=$(import_container scdino-9 IMPORT_EXIT=7) || rc=$?
  [ "$rc" = 7 ] && grep -qF "(exit 7)" <<<"$out" || fail "a failed import should end with its code 7 (got $rc): $out"
  # Staging: a folder of images or an index CSV runs no step; a packed set
  # runs one task a node in the job's container.
  mkdir -p "$scratch/container-packed"
  echo '{}' > "$scratch/container-packed/pack.json"
  sed "s|dataset_dir: \"$work/cells\"|dataset_dir: \"$scratch/container-packed\"|" "$work/run.yaml" > "$work/packed.yaml"
  for name in run csv packed; do
    rm -f "$work/pyxis-srun/calls"
    out=$(cd "$work" && env PATH="$work/pyxis-srun:$(path_without scdino-config)" SCDINO_BIN="$work/no-build" \
            SCDINO_CONTAINER=image.sqsh SCDINO_STAGE_DIR="$scratch/container-stage" \
            bash -c 'source "$0"; scdino_container_args "$1" scdino-9 && scdino_stage "$1" scdino-pack "${container_args[@]}"' \
            "$src/deploy/slurm/lib.sh" "$name.yaml" 2>&1) || fail "$name: staging: $out"
    stage=$(grep -F "scdino-pack --config" "$work/pyxis-srun/calls" || true)
    if [ "$name" = packed ]; then
      grep -qF -- "--ntasks-per-node=1" <<<"$stage" && grep -qF -- "--container-name=scdino-9 " <<<"$stage" &&
        grep -q "staging step took" <<<"$out" || fail "a packed set: no staging step in the job's container: $stage
$out"
    else
      [ -z "$stage" ] && grep -qF "scdino: no staging step: the data set" <<<"$out" ||
        fail "$name: a data set that is not packed ran a staging step: $stage
$out"
    fi
  done
  for i in $(seq 1 65); do echo "$csvs/many/$i/x.tif,a"; done > "$csvs/labels/index.csv"
  err=$(args csv.yaml "" SCDINO_CONTAINER=image.sqsh) && fail "a CSV with images in 65 folders outside it was accepted"
  grep -qF "its images lie in 65 folders outside the CSV's own, the first $csvs/many/1/x.tif; at most 64" <<<"$err" ||
    fail "65 folders: $err"
  # A key of the wrong type is refused by the project's own parser before
  # any srun.
  sed "s|^scdino: {threads: 1}|scdino: {threads: one}|" "$work/run.yaml" > "$work/badkey.yaml"
  err=$(args badkey.yaml "" SCDINO_CONTAINER=image.sqsh) && fail "a config with a bad key was accepted"
  grep -qF "scdino.threads" <<<"$err" || fail "bad key: $err"
  # A registry reference (no / or . in front, no such file) goes to Enroot as it is.
  flags=$(args "$work/run.yaml" "" SCDINO_CONTAINER="nvcr.io#nvidia/pytorch") || fail "a registry reference was refused: $flags"
  grep -qxF -- "--container-image=nvcr.io#nvidia/pytorch" <<<"$flags" || fail "registry reference: $flags"
  ! grep -q -- "--container-name" <<<"$flags" || fail "a container name without being asked for one: $flags"
  err=$(args "$work/run.yaml" "" SCDINO_CONTAINER="$work/missing.sqsh") && fail "a missing image was accepted"
  grep -qF "$work/missing.sqsh: no such image file" <<<"$err" || fail "missing image: $err"
  err=$(args "$work/run.yaml" "" SCDINO_CONTAINER="$work/image.sqsh" SCDINO_CONTAINER_MOUNTS="$work/nothing:/x") && fail "a missing mount was accepted"
  grep -qF "$work/nothing" <<<"$err" || fail "missing mount: $err"
  # Unreadable: root reads everything, so ask as nobody, in a directory
  # nobody may enter (the checkout's may not be).
  tmp=$(mktemp -d /tmp/scdino-container-test.XXXXXX)
  chmod 755 "$tmp"; mkdir -p "$tmp/data" "$tmp/secret"; chmod 700 "$tmp/secret"; chmod 777 "$tmp"
  cp "$src/deploy/slurm/lib.sh" "$tmp/"
  printf 'meta: {output_dir: "%s/runs", dataset_dir: "%s/data"}\ntrain_scDINO: {}\n' "$tmp" "$tmp" > "$tmp/run.yaml"
  touch "$tmp/image.sqsh"; chmod 644 "$tmp/lib.sh" "$tmp/run.yaml" "$tmp/image.sqsh"
  err=$(cd "$tmp" && runuser -u nobody -- env SCDINO_CONFIG_TOOL="$build/services/tools/scdino-config" \
        SCDINO_CONTAINER="$tmp/image.sqsh" SCDINO_CONTAINER_MOUNTS="$tmp/secret:/s" \
        bash -c 'source "$0"; scdino_container_args "$1"' "$tmp/lib.sh" "$tmp/run.yaml" 2>&1) &&
    fail "an unreadable mount was accepted"
  rm -rf "$tmp"
  grep -qF "secret, which does not exist or is not readable" <<<"$err" || fail "unreadable mount: $err"
  sed "s|dataset_dir: \"$work/cells\"|dataset_dir: \"/srv/elsewhere\"|" "$work/run.yaml" > "$work/outside.yaml"
  err=$(args "$work/outside.yaml" "" SCDINO_CONTAINER="$bundle") && fail "a data set outside the bundle's mounts was accepted"
  grep -qF "/srv/elsewhere (meta.dataset_dir) is outside the mounts of the OCI bundle" <<<"$err" || fail "outside the mounts: $err"
  err=$(args "$work/run.yaml" "" SCDINO_CONTAINER="$bundle" SLURM_NTASKS_PER_NODE=2) && fail "two tasks per node on a bundle were accepted"
  grep -q "one task per node" <<<"$err" || fail "two tasks on a bundle: $err"
  err=$(args "$work/run.yaml" "" SCDINO_CONTAINER="$bundle" SLURM_TASKS_PER_NODE="1,2(x3)") && fail "2 tasks on some nodes of a bundle job were accepted"
  grep -q "this job has 2" <<<"$err" || fail "SLURM_TASKS_PER_NODE=1,2(x3) on a bundle: $err"
  echo "ok: Pyxis flags, an index CSV's image folders mounted; missing image, missing and unreadable mounts, config outside the mounts, two tasks per node, 65 CSV folders: refused naming the path"
  ;;
*) fail "unknown phase $phase" ;;
esac
