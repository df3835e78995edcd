#!/usr/bin/env bash
# Every service's /metrics, scraped from the real binaries at the end of a
# small run (their endpoint lingers), passes `promtool check metrics`:
# Prometheus's own lint of names, units, suffixes and help texts. Each
# family a service exports is in the scrape: the trainer's histograms, the
# stages of features and eval, the evaluation's scores, the standard
# process_* metrics.
#
#   promtool_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source "$(dirname "$0")/../support/lib.sh" metrics-promtool "$1" "$2"
fail() { echo "FAIL: $*"; exit 1; }
command -v promtool >/dev/null || fail "no promtool (Debian's prometheus package; scripts/install-deps.sh)"

"$build/services/tools/scdino-synth" --out "$work/cells" --classes 3 --per-class 12 --channels 2 --size 16 \
  --seed 4 >/dev/null || fail "scdino-synth"
cat > "$work/run.yaml" <<YAML
meta: {name_of_run: lint, output_dir: "$work/runs", dataset_dir: "$work/cells", seed: 3,
       selected_channel_combination_per_run: ["01"]}
train_scDINO:
  epochs: 2
  saveckp_freq: 1
  batch_size_per_gpu: 6
  num_workers: 1
  hyperparameters: $TINY_HYPERPARAMETERS
downstream_analyses:
  compute_cls_features: {batch_size_per_gpu: 12, resize_length: 16}
  kNN: {global: {n_neighbors: [3, 5], temperature: 0.07}}
scdino:
  threads: 1
  metrics: {listen: 127.0.0.1, file_sd_dir: "$work/targets", linger_seconds: 60}
YAML

# lint SERVICE COMMAND...: runs the service, scrapes its endpoint once its
# state is final, and lints that scrape.
lint() {
  local service=$1 pid target scrape="$work/$1.metrics" log="$work/$1.log"
  shift
  "$@" > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    target=$(cat "$work"/targets/*_"$service"_rank0*.json 2>/dev/null | sed -n 's/^ *"\([^" ]*:[0-9]*\)",*$/\1/p' | head -1)
    if [ -n "$target" ] && curl -sf "http://$target/metrics" > "$scrape" 2>/dev/null &&
       grep -qE "^scdino_${service}_state\{state=\"(completed|failed|stopped)\"\} 1$" "$scrape"; then
      break
    fi
    kill -0 "$pid" 2>/dev/null || { cat "$log"; fail "scdino-$service ended before its final state was scraped"; }
    sleep 0.5
  done
  grep -qx "scdino_${service}_state{state=\"completed\"} 1" "$scrape" || { cat "$log" "$scrape"; fail "scdino-$service did not complete"; }
  # It lingers 60 s (linger_seconds above); a stop signal ends that.
  local stopped=$SECONDS
  kill -TERM "$pid" 2>/dev/null
  wait "$pid"
  [ $((SECONDS - stopped)) -le 10 ] ||
    fail "scdino-$service took $((SECONDS - stopped)) s to end after a SIGTERM during its 60 s linger: the signal does not end it"
  promtool check metrics < "$scrape" > "$work/$service.promtool" 2>&1 ||
    { cat "$work/$service.promtool"; fail "promtool check metrics on scdino-$service's /metrics"; }
  [ ! -s "$work/$service.promtool" ] || { cat "$work/$service.promtool"; fail "promtool has remarks on scdino-$service's /metrics"; }
  grep -q "^process_cpu_seconds_total " "$scrape" || fail "scdino-$service has no process_* metrics"
  echo "ok: scdino-$service: $(grep -c '^# TYPE' "$scrape") families, promtool check metrics clean"
}
lint trainer "$build/services/trainer/scdino-trainer" --config "$work/run.yaml"
grep -q "^scdino_trainer_step_duration_seconds_bucket" "$work/trainer.metrics" || fail "the trainer's histograms are missing"
lint features "$build/services/features/scdino-features" --config "$work/run.yaml"
grep -q '^scdino_features_stage_progress_ratio{stage=' "$work/features.metrics" || fail "the features' stages are missing"
lint eval "$build/services/eval/scdino-eval" --config "$work/run.yaml"
grep -q '^scdino_eval_knn_top1_ratio{' "$work/eval.metrics" || fail "the evaluation's scores are missing"
# Every long step of the evaluation reports its progress, to its end.
for stage in kNN "linear probe" k-means "neighbour graph" t-SNE UMAP "pca trustworthiness" "umap trustworthiness" \
             "attention maps"; do
  grep -qx "scdino_eval_stage_progress_ratio{stage=\"$stage\"} 1" "$work/eval.metrics" ||
    fail "scdino-eval's stage '$stage' has no progress that reached its end: $(grep stage_progress "$work/eval.metrics")"
done

# The docs name only metrics the services export, and docs/metrics.md names
# every family they export: each `scdino_trainer_*`, `scdino_features_*`,
# `scdino_eval_*` and `process_*` name in a code span of README.md or docs/
# (`scdino_<service>_...` standing for all three) against the scrapes.
$py - "$src" "$work" <<'PY' || fail "the docs and the services' metrics disagree"
import glob, os, re, sys
src, work = sys.argv[1:3]
exported = {}
for service in ("trainer", "features", "eval"):
    for line in open(os.path.join(work, service + ".metrics")):
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            exported[m.group(1)] = m.group(2)
def families(name):  # a histogram's series names reach its family
    return {name, re.sub(r"_(bucket|sum|count)$", "", name)}
# Registered only on a CUDA device: named in the trainer's metrics source.
trainer_source = open(os.path.join(src, "services", "trainer", "trainer_metrics.cc")).read()
cuda_only = {n for n in re.findall(r'Gauge\(r, "(gpu_[a-z_]+)"', trainer_source)}
cuda_only = {"scdino_trainer_" + n for n in cuda_only}
# Library names (CMake targets) share the prefix; they are not metrics.
targets = set()
for cmake in glob.glob(os.path.join(src, "services", "**", "CMakeLists.txt"), recursive=True):
    targets |= set(re.findall(r"add_(?:library|executable)\((scdino_\w+)", open(cmake).read()))
bad, documented = [], set()
for path in [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md"))):
    text = open(path).read()
    for span in re.findall(r"`([^`\n]+)`", text):
        # Not inside a recording rule's name (level:metric:operations), not a prefix.
        for name in re.findall(r"(?<![:\w])((?:scdino_(?:trainer|features|eval|<service>)|process)_[a-z0-9_<>]*[a-z0-9>])(?![:\w])", span):
            if name in targets or name in cuda_only:
                continue
            names = [name.replace("<service>", s) for s in ("trainer", "features", "eval")] if "<service>" in name else [name]
            if "<" in name.replace("<service>", ""):
                names = []  # a pattern such as scdino_<service>_<unit>_processed_total: checked below by its table
            for n in names:
                if families(n) & exported.keys():
                    documented |= families(n) & exported.keys()
                else:
                    bad.append(f"{os.path.relpath(path, src)}: `{n}` is not exported by any service")
metrics_md = open(os.path.join(src, "docs", "metrics.md")).read()
for name in exported:
    if name in documented:
        continue
    generic = re.sub(r"^scdino_(trainer|features|eval)_", "scdino_<service>_", name)
    unit = re.sub(r"^scdino_(features|eval)_(images|queries)_", r"scdino_<service>_<unit>_", name)
    if not any(f"`{g}`" in metrics_md for g in (name, generic, unit)):
        bad.append(f"docs/metrics.md does not name the exported family {name}")
for b in bad:
    print(b)
print(f"{len(exported)} families exported, {len(documented)} named in the docs, {len(bad)} disagreements")
sys.exit(1 if bad else 0)
PY
echo "ok: every metric the docs name is exported, and docs/metrics.md names every exported family"
