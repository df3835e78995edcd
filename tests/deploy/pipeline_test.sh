#!/usr/bin/env bash
# The README's main job end to end (scripts/run-example.sh on
# configs/small-data.yaml, output in a scratch directory), then what a user does
# with its results: the kNN margin of the trained model over a random one,
# the AnnData file opened by Debian's python3-anndata, a DINO .pth checkpoint
# through scripts/convert-dino-checkpoint.py, and scdino-features stopped
# through the control API and resumed. Lines starting with FAIL: fail the
# ctest.
#
#   bash tests/deploy/pipeline_test.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
source "$(dirname "$0")/../support/lib.sh" pipeline "$1" "$2"
features="$build/services/features/scdino-features"
features_pid=
cleanup() { [ -n "$features_pid" ] && kill -9 "$features_pid" 2>/dev/null; }
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
# The small-data recipe's learning checks (issue: "a recipe that learns on
# small data"; figures in docs/training.md): the trained teacher's top-1 kNN
# accuracy beats the random ViT's by this much (absolute, at k = 20).
margin=0.10

sed -e "s|output_dir: \"runs\"|output_dir: \"$work/runs\"|" -e "s|dataset_dir: \"data/example\"|dataset_dir: \"$work/data\"|" \
  "$src/configs/small-data.yaml" > "$work/example.yaml"
grep -qF "$work/data" "$work/example.yaml" || fail "could not point the example config at $work"
run="$work/runs/example"

# 1. The main job.
SCDINO_SKIP_SETUP=1 BUILD_DIR="$build" bash "$src/scripts/run-example.sh" "$work/example.yaml" \
  >"$work/example.out" 2>"$work/example.err" || { tail -20 "$work/example.err"; fail "run-example.sh failed"; }
grep -q "eval/knn_per_checkpoint.csv" "$work/example.out" || fail "run-example.sh does not say where the results are"
for stage in training "features of every checkpoint" "evaluation and the report"; do
  grep -qE "^ +[0-9]+ s  $stage" "$work/example.out" || fail "run-example.sh does not say how long '$stage' took"
done
for f in checkpoint.safetensors features/checkpoint/features.npy features/checkpoint/index.csv \
         features/checkpoint/metadata.json features/checkpoint/features.h5ad features/random_init/features.npy \
         eval/checkpoint/knn_results.json eval/checkpoint/knn_results.csv eval/checkpoint/per_class.csv \
         eval/checkpoint/confusion_matrix.csv eval/checkpoint/confusion_matrix.png eval/checkpoint/pca.png \
         eval/checkpoint/tsne.png eval/checkpoint/umap.png eval/checkpoint/embeddings.csv \
         eval/checkpoint/embeddings.h5ad eval/knn_per_checkpoint.csv; do
  [ -s "$run/$f" ] || fail "the main job did not write $f"
done
[ "$(ls "$run"/eval/checkpoint/attention/*.png 2>/dev/null | wc -l)" -ge 4 ] || fail "fewer than 4 attention maps"
[ ! -d "$run/features/checkpoint/shards" ] || fail "the shards were left behind after assembly"
echo "ok: main job wrote checkpoints, features, kNN results and plots"
# Every long stage said how far it got and, at its end, its count and time
# (common/progress.h).
for want in "scdino: channel statistics: [0-9]+ images in" "scdino-trainer: learning check: loading: [0-9]+ images in" \
            "scdino-features: [0-9]+ images in" "scdino-eval: [0-9]+ queries in" "scdino-eval: linear probe: [0-9]+ fits in" \
            "scdino-eval: k-means: [0-9]+ restarts in" "scdino-eval: t-SNE: [0-9]+ iterations in" \
            "scdino-eval: UMAP: [0-9]+ epochs in"; do
  grep -qE "$want" "$work/example.err" || fail "the main job printed no progress line like '$want'"
done
echo "ok: the statistics, learning check, features and every evaluation step printed their progress"

# 1b. The report a person reads (eval/report.html), as headless Chromium
# renders it: a screenshot, every figure loaded (the page's own count of
# broken images is 0), the curves with their random-init baseline, the
# table, the latest checkpoint's UMAP by class and by cluster, confusion
# matrices and attention maps, the training's health. Then the same page
# with one figure gone must say so: the check can fail.
chromium=$(command -v chromium-headless-shell || command -v chromium || true)
[ -n "$chromium" ] || fail "no headless Chromium (Debian: chromium-headless-shell; scripts/install-deps.sh installs it)"
render() {  # render HTML PNG DOM: a screenshot and the DOM after the page's load event
  "$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,3400 \
    --screenshot="$2" "file://$1" >/dev/null 2>&1 || return 1
  "$chromium" --headless --no-sandbox --disable-gpu --virtual-time-budget=10000 --dump-dom "file://$1" >"$3" 2>/dev/null
}
[ -s "$run/eval/report.html" ] || fail "the main job wrote no eval/report.html"
render "$run/eval/report.html" "$work/report.png" "$work/report.dom" || fail "Chromium could not render eval/report.html"
$py - "$work/report.png" "$work/report.dom" <<'PY' || fail "eval/report.html is incomplete (above)"
import re, sys
import numpy as np
from PIL import Image
png, dom = Image.open(sys.argv[1]).convert("L"), open(sys.argv[2]).read()
body = re.search(r"<body ([^>]*)>", dom).group(1)
images, broken = (int(re.search(k + r'="(\d+)"', body).group(1)) for k in ("data-images", "data-broken-images"))
print(f"report.html: {images} figures, {broken} broken, {dom.count('<svg')} charts, screenshot {png.size[0]}x{png.size[1]}")
assert broken == 0 and images >= 8, body
for want in ("Over checkpoints", "kNN top-1 (best k)", "linear probe top-1", "kNN, random init", "k-means ARI",
             "/umap.png", "/umap_kmeans.png", "/confusion_matrix.png", "/linear_probe_confusion_matrix.png",
             "/attention/class_", "Training health",
             "<td>random_init</td>", "<td>checkpoint0015</td>"):
    assert want in dom, "missing: " + want
assert dom.count("<svg") >= 6, "fewer than 6 charts"
# The data: a histogram per channel of the example's 5, the crop preview
# embedded (it loads in the copy of eval/ below too).
assert "<h2>Data</h2>" in dom and 'src="data:image/png;base64,' in dom, "no data section with the crop preview"
assert dom.count("pixels (log)") == 5, f"{dom.count('pixels (log)')} channel histograms, expected 5"
pixels = np.asarray(png, dtype=np.float64)
inked = (pixels < 200).mean(axis=1)  # dark pixels per row
assert pixels.std() > 20 and (inked > 0.01).sum() > 1000, "the screenshot is (nearly) blank"
PY
gone=$(grep -o 'src="[^"]*/umap_kmeans.png"' "$work/report.dom" | head -1 | sed 's/^src="//; s/"$//')
mkdir -p "$work/report-copy"
cp -r "$run/eval/." "$work/report-copy/"
rm "$work/report-copy/$gone"
render "$work/report-copy/report.html" "$work/report-copy.png" "$work/report-copy.dom" || fail "Chromium could not render the copy"
grep -q 'data-broken-images="1"' "$work/report-copy.dom" && grep -qF "1 figure(s) could not be loaded: $gone" "$work/report-copy.dom" ||
  fail "a report with a missing figure does not say so: $(grep -o '<body[^>]*>' "$work/report-copy.dom")"
echo "ok: eval/report.html in headless Chromium: every figure loaded, curves with the random-init baseline, table, health, channel histograms, the crop preview; a missing figure is named"

# 2. The learning checks: every epoch's log line carries the health signals
# and, from the second epoch, the verdict healthy; the loss ends below its
# start and below ln(out_dim); the trained teacher beats a random ViT of the
# same shape, on the same data, split and seed; its features are not
# collapsed (mean pairwise cosine below 0.9).
$py - "$run" "$margin" <<'PY' || fail "the small-data recipe fails a learning check (above)"
import csv, json, math, sys
import numpy as np
run, margin = sys.argv[1], float(sys.argv[2])
lines = [json.loads(l) for l in open(run + "/log.jsonl")]
for l in lines:
    for k in ("teacher_entropy", "teacher_entropy_ratio", "student_teacher_kl", "teacher_batch_entropy",
              "center_norm", "backbone_cls_std"):
        assert k in l, f"epoch {l['epoch']} has no {k}"
assert "collapse" not in lines[0] and all(l["collapse"] in ("healthy", "uniform_collapse", "onehot_collapse")
                                          for l in lines[1:]), "verdicts " + str([l.get("collapse") for l in lines])
print("verdicts per epoch:", [l.get("collapse", "-") for l in lines])
assert all(l["collapse"] == "healthy" for l in lines[1:]), "a collapse verdict"
losses = [l["loss"] for l in lines]
print("loss per epoch:", " ".join(f"{v:.3f}" for v in losses), f"(ln K = {math.log(256):.3f})")
assert losses[-1] < losses[0] - 0.1 and losses[-1] < math.log(256) - 0.1, "the loss does not end clearly below its start and ln K"
for name in ("checkpoint", "random_init"):
    x = np.load(f"{run}/features/{name}/features.npy").astype(np.float64)
    n = len(x)
    cosine = ((x @ x.T).sum() - n) / (n * n - n)
    print(f"{name}: mean pairwise cosine {cosine:.3f}")
    assert name != "checkpoint" or cosine < 0.9, "the trained features are collapsed"
rows = list(csv.DictReader(open(run + "/eval/knn_per_checkpoint.csv")))
top1 = {(r["features"], int(r["k"])): float(r["top1_accuracy"]) for r in rows}
trained, rand = top1[("checkpoint", 20)], top1[("random_init", 20)]
print(f"kNN top-1 at k=20: trained {trained:.3f}, random init {rand:.3f}, margin {trained - rand:+.3f} "
      f"(required {margin:+.3f})")
assert trained >= rand + margin
PY
echo "ok: the small-data recipe learns: healthy, loss below its start and ln K, kNN above random, features spread"

# 2b. The raw-pixel baseline (scdino-features --raw-pixels), against an
# independent preparation in PyTorch: the TIFFs min-maxed per image and
# channel, resized bilinearly to resize_length, normalised with the run's
# statistics, area-averaged to at most 4,096 values; then DINO's weighted
# 20-NN (T = 0.07) on them, against scdino-eval's result for raw_pixels.
$py - "$run" "$work/data" <<'PY' || fail "the raw-pixel baseline is not the images prepared as for the model"
import csv, json, os, sys
import numpy as np, tifffile, torch
import torch.nn.functional as F
run, data = sys.argv[1], sys.argv[2]
d = run + "/features/raw_pixels"
meta = json.load(open(d + "/metadata.json"))
rows = list(csv.DictReader(open(d + "/index.csv")))
got = np.load(d + "/features.npy")
size = meta["preprocessing"]["resize"]
mean = torch.tensor(meta["statistics"]["mean"]).view(-1, 1, 1)
std = torch.tensor(meta["statistics"]["std"]).view(-1, 1, 1)
channels = meta["channels"]["indices"]
kept = meta["model"]["raw_pixels"]["kept_side"]
assert len(channels) * kept * kept <= 4096 < len(channels) * (kept + 1) ** 2, meta["model"]
want = []
for r in rows:
    a = tifffile.imread(r["path"]).astype(np.float64)
    if a.shape[-1] == 5 and a.shape[0] != 5:
        a = np.moveaxis(a, -1, 0)
    a = a[channels]
    lo = a.reshape(len(a), -1).min(1)[:, None, None]
    hi = a.reshape(len(a), -1).max(1)[:, None, None]
    x = torch.from_numpy(np.where(hi > lo, (a - lo) / np.where(hi > lo, hi - lo, 1), 0.0)).float()
    x = F.interpolate(x[None], size=(size, size), mode="bilinear", align_corners=False)[0]
    x = F.adaptive_avg_pool2d((x - mean) / std, (kept, kept)).flatten()
    want.append((x / x.norm()).numpy())
want = np.stack(want)
cos = (want * got).sum(1)
print(f"raw pixels: {got.shape[0]} x {got.shape[1]} ({len(channels)} x {kept} x {kept} of {size} px), "
      f"cosine to the PyTorch preparation: min {cos.min():.5f}")
assert got.shape == want.shape and cos.min() > 0.999, "rows differ from the images"
train = np.array([r["split"] == "train" for r in rows])
y = np.array([int(r["class_index"]) for r in rows])
sim = got[~train] @ got[train].T
top = np.argsort(-sim, axis=1)[:, :20]
votes = np.zeros((len(top), y.max() + 1))
for q in range(len(top)):
    for j in top[q]:
        votes[q, y[train][j]] += np.exp(sim[q, j] / 0.07)
ours = float((votes.argmax(1) == y[~train]).mean())
knn = {k["k"]: k["top1_accuracy"] for k in json.load(open(run + "/eval/raw_pixels/knn_results.json"))["knn"]}
print(f"raw pixels 20-NN top-1: scdino-eval {knn[20]:.3f}, numpy {ours:.3f}")
# Within one held-out image: float32 similarities may order a near-tie otherwise.
assert abs(knn[20] - ours) <= 1.0 / len(top) + 1e-9, "scdino-eval's kNN on the raw pixels is not DINO's"
PY
grep -qF '<p class="verdict ' "$run/eval/report.html" || fail "the report does not judge the run against its baselines"
grep -q "kNN, raw pixels" "$run/eval/report.html" || fail "the report does not draw the raw-pixel baseline"
echo "ok: the raw-pixel baseline is the prepared images, its kNN is DINO's, the report judges against it: $(grep -o 'Did it learn? [^<]*' "$run/eval/report.html" | cut -c1-200)"

# 3. The features as the user's Python sees them.
$py - "$run/features/checkpoint" "$work/data" <<'PY' || fail "features.h5ad / features.npy / index.csv disagree"
import csv, json, os, sys
import anndata, numpy as np
d, data = sys.argv[1], sys.argv[2]
x = np.load(os.path.join(d, "features.npy"))
rows = list(csv.DictReader(open(os.path.join(d, "index.csv"))))
meta = json.load(open(os.path.join(d, "metadata.json")))
files = sorted(os.path.join(root, f) for root, _, fs in os.walk(data) for f in fs if f.endswith(".tif"))
assert x.dtype == np.float32 and x.shape == (512, 192), (x.dtype, x.shape)
assert np.allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5), "rows are not L2-normalised"
assert sorted(os.path.abspath(r["path"]) for r in rows) == [os.path.abspath(f) for f in files], "index.csv rows"
assert {r["split"] for r in rows} == {"train", "test"}
a = anndata.read_h5ad(os.path.join(d, "features.h5ad"))
assert a.shape == x.shape and np.array_equal(np.asarray(a.X), x)
assert list(a.obs["path"]) == [r["path"] for r in rows] and list(a.obs["split"]) == [r["split"] for r in rows]
assert list(a.obs["class_name"].astype(str)) == [r["class_name"] for r in rows]
assert int(a.uns["epoch"]) == meta["checkpoint"]["epoch"] == 16, (a.uns["epoch"], meta["checkpoint"])
print("anndata", anndata.__version__, a)
PY
echo "ok: features.h5ad opens in anndata and matches features.npy and index.csv"

# 3b. The embeddings as scanpy takes them: obsm X_pca, X_tsne, X_umap of the
# test rows, equal to embeddings.csv; their trustworthiness in the results.
$py - "$run/eval/checkpoint" <<'PY' || fail "embeddings.h5ad / embeddings.csv / knn_results.json disagree"
import csv, json, os, sys
import anndata, numpy as np
d = sys.argv[1]
a = anndata.read_h5ad(os.path.join(d, "embeddings.h5ad"))
rows = list(csv.DictReader(open(os.path.join(d, "embeddings.csv"))))
assert a.n_obs == len(rows) == 104, (a.n_obs, len(rows))
assert set(a.obs["split"]) == {"test"}
for name in ("pca", "tsne", "umap"):
    m = np.asarray(a.obsm["X_" + name])
    assert m.shape == (104, 2) and np.isfinite(m).all(), (name, m.shape)
    c = np.array([[float(r[f"{name}_1"]), float(r[f"{name}_2"])] for r in rows])
    assert np.allclose(m, c, rtol=1e-4, atol=1e-4), name
emb = json.load(open(os.path.join(d, "knn_results.json")))["embeddings"]
for name in ("pca", "tsne", "umap"):
    t = emb[name]["trustworthiness"]
    assert 0.5 < t <= 1.0, (name, t)
    print(f"{name}: trustworthiness {t:.3f}")
PY
echo "ok: embeddings.h5ad (obsm X_pca, X_tsne, X_umap) opens in anndata and matches embeddings.csv"

# 4. A reference DINO checkpoint (.pth with student/teacher state dicts, as
# main_dino.py saves) of the same weights gives the same features.
$py - "$run/checkpoint.safetensors" "$work/dino.pth" <<'PY' || fail "could not write a DINO .pth"
import json, struct, sys
import numpy as np, torch
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
header = json.loads(b[8:8 + n])
state = {"student": {}, "teacher": {}}
for name, h in header.items():
    if name == "__metadata__" or h["dtype"] != "F32" or not name.startswith(("student.", "teacher.")):
        continue
    net, rest = name.split(".", 1)
    lo, hi = h["data_offsets"]
    t = torch.from_numpy(np.frombuffer(b[8 + n + lo:8 + n + hi], dtype=np.float32).reshape(h["shape"]).copy())
    state[net][("module." if net == "student" else "") + rest] = t
torch.save({**state, "epoch": 6}, sys.argv[2])
PY
$py "$src/scripts/convert-dino-checkpoint.py" "$work/dino.pth" "$work/converted.safetensors" >"$work/convert.out" 2>&1 ||
  { cat "$work/convert.out"; fail "convert-dino-checkpoint.py failed"; }
"$features" --config "$work/example.yaml" --checkpoint "$work/converted.safetensors" >/dev/null 2>"$work/converted.err" ||
  { tail -5 "$work/converted.err"; fail "scdino-features on the converted weights failed"; }
$py -c "import numpy as np, sys; a, b = np.load(sys.argv[1]), np.load(sys.argv[2]); assert a.shape == b.shape and np.abs(a - b).max() < 1e-5, np.abs(a - b).max()" \
  "$run/features/converted/features.npy" "$run/features/checkpoint/features.npy" ||
  fail "the converted .pth does not give the checkpoint's features"
printf 'not a checkpoint' > "$work/bad.pth"
$py "$src/scripts/convert-dino-checkpoint.py" "$work/bad.pth" "$work/bad.safetensors" 2>"$work/bad.err"
[ $? = 2 ] && grep -qF "bad.pth" "$work/bad.err" || fail "a bad .pth should exit 2 naming the file"
echo "ok: DINO .pth -> convert-dino-checkpoint.py -> the same features ($(cat "$work/convert.out"))"

# 5. Two ranks (as torchrun or srun -n 2 start them) over shards of 100
# images, 6 shards for 512: the same rows as one process.
sed -e "s|^  cache_images: true|  cache_images: true\n  features: {shard_size: 100}|" "$work/example.yaml" > "$work/ranks.yaml"
cp "$run/checkpoint.safetensors" "$work/two_ranks.safetensors"
for r in 1 0; do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 "$features" --config "$work/ranks.yaml" --checkpoint "$work/two_ranks.safetensors" \
    --threads 1 >/dev/null 2>"$work/rank$r.err" &
  eval "rank${r}_pid=$!"
done
wait "$rank1_pid" || { tail -5 "$work/rank1.err"; fail "rank 1 failed"; }
wait "$rank0_pid" || { tail -5 "$work/rank0.err"; fail "rank 0 failed"; }
$py - "$run/features/two_ranks" "$run/features/checkpoint" <<'PY' || fail "two ranks disagree with one process"
import numpy as np, sys
a, b = np.load(sys.argv[1] + "/features.npy"), np.load(sys.argv[2] + "/features.npy")
assert a.shape == b.shape and np.abs(a - b).max() < 1e-5, (a.shape, b.shape)
assert open(sys.argv[1] + "/index.csv").read() == open(sys.argv[2] + "/index.csv").read()
PY
grep -q "3 shards written" "$work/rank1.err" || { tail -3 "$work/rank1.err"; fail "rank 1 did not write 3 of the 6 shards"; }
echo "ok: two ranks, 6 shards of up to 100 images, the same features and index as one process"

# 5a. A checkpoint trained on 5 channels with a config that selects 3:
# a clear error naming both counts and the checkpoint, exit 2 (bad input).
sed -e 's|\["01234"\]|["012"]|' -e 's|name_of_run: [^,}]*|name_of_run: three|' "$work/example.yaml" > "$work/three.yaml"
"$features" --config "$work/three.yaml" --checkpoint "$run/checkpoint.safetensors" --threads 1 >/dev/null 2>"$work/three.err"
rc=$?
[ "$rc" = 2 ] || { tail -3 "$work/three.err"; fail "a channel-count mismatch exited $rc, expected 2"; }
grep -qF "checkpoint.safetensors (its teacher) has 5 input channel(s)" "$work/three.err" && grep -qF "selects 3: [0,1,2]" "$work/three.err" ||
  { cat "$work/three.err"; fail "the channel mismatch does not name the checkpoint and both counts"; }
echo "ok: a 5-channel checkpoint with 3 selected channels: exit 2, $(grep -o 'has 5 input.*' "$work/three.err" | head -c 120)"

# 5b. The rendezvous store has no authentication: a process of another user
# that connects to its port while two ranks extract features writes a stop
# request and a rank-0 outcome under the keys the ranks used to read
# ("scdino/requests", "scdino/rank0/..."). The job's keys lie under its
# secret (<run_dir>/rendezvous.secret): both ranks finish every shard.
port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s|resize_length: 48 |resize_length: 96 |" -e "s|^  cache_images: true|  cache_images: true\n  features: {shard_size: 32}|" \
  "$work/example.yaml" > "$work/foreign.yaml"
rm -rf "$run/features/random_init"
for r in 1 0; do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$features" --config "$work/foreign.yaml" \
    --random-init --threads 1 >/dev/null 2>"$work/foreign$r.err" &
  eval "foreign${r}_pid=$!"
done
$py - "$port" > "$work/foreign.out" 2>&1 <<'PY' &
import datetime, sys, time
import torch.distributed as dist
port, writes, deadline = int(sys.argv[1]), 0, time.time() + 120
while time.time() < deadline:
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=1),
                              wait_for_workers=False)
        while True:
            store.set("scdino/requests", "-s")
            store.set("scdino/rank0/channel-statistics", "error:planted by another process")
            store.set("requests", "-s")
            writes += 1
            time.sleep(0.05)
    except Exception:
        if writes:
            break
        time.sleep(0.05)
print("writes", writes)
PY
foreign_pid=$!
wait "$foreign1_pid" || { tail -5 "$work/foreign1.err"; fail "rank 1 failed beside a foreign writer to its store"; }
wait "$foreign0_pid" || { tail -5 "$work/foreign0.err"; fail "rank 0 failed beside a foreign writer to its store"; }
wait "$foreign_pid"
grep -qE "writes [1-9]" "$work/foreign.out" || { cat "$work/foreign.out"; fail "the foreign process never wrote to the job's store"; }
grep -q "8 shards written" "$work/foreign1.err" || { tail -3 "$work/foreign1.err"; fail "rank 1 did not write its 8 of the 16 shards"; }
$py -c "import numpy as np, sys; assert np.load(sys.argv[1]).shape[0] == 512" "$run/features/random_init/features.npy" ||
  fail "the features of the job beside the foreign writer do not have 512 rows"
[ "$(stat -c %a "$run/rendezvous.secret")" = 600 ] || fail "the rendezvous secret is not private"
echo "ok: a foreign process wrote stop requests and rank-0 outcomes to the store $(cut -d' ' -f2 "$work/foreign.out") times; both ranks finished all 16 shards"

# 6. Stopped through the control API mid-run (exit 4, complete shards kept,
# progress metrics exported), then resumed: the rerun skips those shards.
sed -e "s|resize_length: 48 |resize_length: 96 |" -e "s|^  cache_images: true|  cache_images: true\n  features: {shard_size: 64}\n  metrics: {listen: 127.0.0.1, file_sd_dir: \"$work/targets\"}|" \
  "$work/example.yaml" > "$work/slow.yaml"
grep -q "shard_size: 64" "$work/slow.yaml" || fail "could not write the slow config"
out="$run/features/random_init"
rm -rf "$out"
"$features" --config "$work/slow.yaml" --random-init --threads 1 >/dev/null 2>"$work/stop.err" &
features_pid=$!
for _ in $(seq 1 300); do
  [ -n "$(ls "$out"/shards/*.json 2>/dev/null)" ] && break
  sleep 0.1
done
[ -n "$(ls "$out"/shards/*.json 2>/dev/null)" ] || fail "no shard written within 30 s"
metrics_url="http://$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["targets"][0])' "$work"/targets/*.json)/metrics"
$py - "$metrics_url" <<'PY' || fail "the features progress metrics are missing or wrong"
import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=5).read().decode()
v = {l.split("{")[0].split(" ")[0]: float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l and l[0] != "#"}
assert v["scdino_features_images_to_process"] == 512, v.get("scdino_features_images_to_process")
assert 0 < v["scdino_features_images_processed_total"] <= 512, v["scdino_features_images_processed_total"]
print("progress", v["scdino_features_images_processed_total"], "of", v["scdino_features_images_to_process"])
PY
"$ctl" status --run-dir "$run" --service features --json > "$work/status.json" || fail "scdinoctl status failed"
$py -c 'import json,sys; s=json.load(open(sys.argv[1])); assert s["state"] == "RUN_STATE_RUNNING", s' "$work/status.json" ||
  fail "scdino-features is not RUNNING: $(cat "$work/status.json")"
"$ctl" stop --run-dir "$run" --service features >/dev/null || fail "scdinoctl stop failed"
wait "$features_pid"
rc=$?
features_pid=
[ "$rc" = 4 ] || { tail -5 "$work/stop.err"; fail "scdino-features exited $rc after stop, expected 4"; }
[ ! -f "$out/features.npy" ] || fail "stopped before the end, yet features.npy exists"
kept=$(ls "$out"/shards/*.json | wc -l)
[ "$kept" -ge 1 ] && [ "$kept" -lt 8 ] || fail "expected 1..7 complete shards of 8 after stop, found $kept"
"$features" --config "$work/slow.yaml" --random-init --threads 2 >/dev/null 2>"$work/resume.err" ||
  { tail -5 "$work/resume.err"; fail "the resumed run failed"; }
grep -qE "shards written, $kept already complete" "$work/resume.err" ||
  { tail -3 "$work/resume.err"; fail "the resumed run did not skip the $kept complete shards"; }
$py -c "import numpy as np, sys; x = np.load(sys.argv[1]); assert x.shape == (512, 192), x.shape" "$out/features.npy" ||
  fail "the resumed run's features.npy"
echo "ok: stop through the control API (exit 4, $kept of 8 shards kept), resume skipped them"

# 7. scdino-eval stopped in its slowest phases, within seconds: a SIGTERM
# during the t-SNE (exit 75), scdinoctl stop during the UMAP (exit 4); the
# kNN results written before stay.
cp -r "$run/features/checkpoint" "$work/stopped_eval"
eval_bin="$build/services/eval/scdino-eval"
stop_eval() {  # config, phase marker, how (TERM | api), expected exit code, the stage scdinoctl shows
  local out="$run/eval/stopped_eval" pid rc t0 took
  rm -rf "$out"
  "$eval_bin" --config "$1" --features "$work/stopped_eval" --no-attention --threads 1 >/dev/null 2>"$work/eval-stop.err" &
  pid=$!
  for _ in $(seq 1 600); do grep -q "$2" "$work/eval-stop.err" && break; sleep 0.1; done
  grep -q "$2" "$work/eval-stop.err" || { kill -9 $pid; fail "scdino-eval never reached '$2'"; }
  sleep 1
  kill -0 $pid 2>/dev/null || fail "scdino-eval ended by itself during '$2': make it longer"
  # The step in progress, with its own count, in the status (and the table).
  "$ctl" status --run-dir "$run" --service eval --json > "$work/eval-status.json" ||
    { kill -9 $pid; fail "scdinoctl status failed during '$2'"; }
  $py - "$work/eval-status.json" "$5" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["progress"]
assert p.get("stage") == sys.argv[2], p
assert int(p["stage_total"]) > 0 and int(p["stage_done"]) > 0 and not p["stage_finished"], p
PY
  [ "$?" = 0 ] || { kill -9 $pid; fail "scdinoctl status does not show the stage '$5': $(cat "$work/eval-status.json")"; }
  "$ctl" status --run-dir "$run" --service eval | grep -q "^stage  *$5: " ||
    { kill -9 $pid; fail "the status table has no stage line for '$5'"; }
  t0=$(date +%s.%N)
  if [ "$3" = TERM ]; then kill -TERM $pid; else "$ctl" stop --run-dir "$run" --service eval >/dev/null || fail "scdinoctl stop failed"; fi
  wait $pid
  rc=$?
  took=$($py -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
  [ "$rc" = "$4" ] || { tail -5 "$work/eval-stop.err"; fail "scdino-eval exited $rc after $3 during '$2', expected $4"; }
  $py -c "import sys; assert float(sys.argv[1]) < 5, sys.argv[1]" "$took" || fail "scdino-eval took $took s to stop during '$2'"
  [ -s "$out/knn_results.json" ] || fail "the kNN results were not kept after the stop during '$2'"
  echo "ok: scdino-eval stopped by $3 during '$2' in $took s (exit $rc), kNN results kept"
}
sed -e "s|^  cache_images: true|  cache_images: true\n  evaluation: {tsne_iterations: 100000000, umap: false}|" \
  "$work/example.yaml" > "$work/long-tsne.yaml"
stop_eval "$work/long-tsne.yaml" "t-SNE of" TERM 75 t-SNE
sed -e "s|^  cache_images: true|  cache_images: true\n  evaluation: {tsne: false}|" \
  -e "s|^downstream_analyses:|downstream_analyses:\n  umap_eval: {epochs: 100000000}|" "$work/example.yaml" > "$work/long-umap.yaml"
grep -q "epochs: 100000000" "$work/long-umap.yaml" || fail "could not write the long UMAP config"
stop_eval "$work/long-umap.yaml" "UMAP of" api 4 UMAP
