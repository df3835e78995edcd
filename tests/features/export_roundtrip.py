#!/usr/bin/env python3
"""scdino-export's round trip, as a PyTorch user meets it.

A short training (scdino-trainer, the README's recipe on 24 RGB PNGs written
here), the features of its checkpoint (scdino-features, raw CLS tokens),
then scdino-export to .pth and .safetensors. The Python lines scdino-export
prints are run as they are: they build DINO's ViT with vision_transformer.py
and load the state dict with strict=True. The images are prepared as
scdino-features does (per-channel min-max, the run's channel statistics)
and the CLS tokens of that model must equal scdino's features within 1e-4.

vision_transformer.py is DINO's own file where SCDINO_DINO_SOURCE names a
checkout of facebookresearch/dino; otherwise tests/features/reference_vit,
DINO's constructors over the project's re-implementation of DINO's ViT.
Bad input on the command line: an existing output (refused, kept, then
replaced with --force), a checkpoint without a teacher.
Lines starting with FAIL: fail the test.

    export_roundtrip.py BUILD_DIR SOURCE_DIR WORK_DIR
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))
from make_parity_fixture import read_safetensors, write_safetensors  # noqa: E402

build, source, work = sys.argv[1:4]
here = os.path.dirname(os.path.abspath(__file__))
bins = {b: os.path.join(build, "services", d, b) for b, d in (
    ("scdino-trainer", "trainer"), ("scdino-features", "features"), ("scdino-export", "tools"))}
failures = []


def fail(message):
    print(f"FAIL: {message}", flush=True)
    failures.append(message)


def run(args, expect=0):
    p = subprocess.run(args, cwd=work, capture_output=True, text=True)
    if p.returncode != expect:
        print(p.stdout[-3000:], p.stderr[-3000:])
        fail(f"{' '.join(args)} exited {p.returncode}, expected {expect}")
        sys.exit(1)
    return p


shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
torch.set_num_threads(1)

# 24 RGB images of 32 px in two classes: a bright disc, or a bright ring.
rng = np.random.default_rng(5)
yy, xx = np.mgrid[:32, :32]
for i in range(24):
    cls = ("disc", "ring")[i % 2]
    r = np.hypot(yy - 16 - rng.integers(-3, 4), xx - 16 - rng.integers(-3, 4))
    shape = (r < 9) if cls == "disc" else ((r > 6) & (r < 10))
    img = rng.integers(0, 60, (32, 32, 3)) + shape[..., None] * rng.integers(80, 190, 3)
    os.makedirs(f"{work}/data/{cls}", exist_ok=True)
    Image.fromarray(img.clip(0, 255).astype(np.uint8), "RGB").save(f"{work}/data/{cls}/cell_{i:02d}.png")

text = open(os.path.join(source, "configs", "small-data.yaml")).read()
for old, new in (('name_of_run: "example"', 'name_of_run: "roundtrip"'),
                 ('dataset_dir: "data/example"', 'dataset_dir: "data"'),
                 ('channel_dict: { 0: "AF647", 1: "BF", 2: "DAPI", 3: "CD3", 4: "PE" }',
                  'channel_dict: { 0: "R", 1: "G", 2: "B" }'),
                 ('["01234"]', '["012"]'), ("epochs: 16", "epochs: 2"), ("batch_size_per_gpu: 32", "batch_size_per_gpu: 8"),
                 ("global_crops_size: 48", "global_crops_size: 32"), ("local_crops_size: 24", "local_crops_size: 16"),
                 ("resize_length: 48 ", "resize_length: 32 "), ("normalize: True", "normalize: False")):
    if old not in text:
        fail(f"configs/small-data.yaml no longer holds '{old}'")
        sys.exit(1)
    text = text.replace(old, new, 1)
open(f"{work}/roundtrip.yaml", "w").write(text)

run([bins["scdino-trainer"], "--config", "roundtrip.yaml", "--threads", "2"])
checkpoint = f"{work}/runs/roundtrip/checkpoint.safetensors"
run([bins["scdino-features"], "--config", "roundtrip.yaml", "--checkpoint", checkpoint])
found = glob.glob(f"{work}/runs/roundtrip/**/metadata.json", recursive=True)
if len(found) != 1:
    fail(f"expected one features directory, found {found}")
    sys.exit(1)
features_dir = os.path.dirname(found[0])
ours = np.load(f"{features_dir}/features.npy")
paths = [line.split(",")[1] for line in open(f"{features_dir}/index.csv").read().splitlines()[1:]]
meta = json.load(open(found[0]))
stats = meta["statistics"]
mean, std = np.array(stats["mean"], np.float32), np.array(stats["std"], np.float32)
print(f"scdino-features: {ours.shape[0]} x {ours.shape[1]} raw CLS tokens in {features_dir}")


def prepared(path):
    """scdino-features' preparation: per-channel min-max, no crop, 32 px already, channel statistics."""
    x = np.asarray(Image.open(os.path.join(work, path) if not os.path.isabs(path) else path).convert("RGB"),
                   np.float32).transpose(2, 0, 1)
    lo, hi = x.min(axis=(1, 2), keepdims=True), x.max(axis=(1, 2), keepdims=True)
    x = np.where(hi > lo, (x - lo) / np.maximum(hi - lo, 1e-30), 0)
    return (x - mean[:, None, None]) / std[:, None, None]


batch = torch.from_numpy(np.stack([prepared(p) for p in paths]).astype(np.float32))

dino = os.environ.get("SCDINO_DINO_SOURCE")
sys.path.insert(0, dino if dino else os.path.join(here, "reference_vit"))
import vision_transformer  # noqa: E402

print(f"vision_transformer.py: {vision_transformer.__file__}")
for out in ("vit.pth", "vit.safetensors"):
    p = run([bins["scdino-export"], "--checkpoint", checkpoint, "--out", f"{work}/{out}"])
    print(p.stderr.strip())
    lines = p.stdout
    if "strict=True" not in lines:
        fail(f"scdino-export printed no loading lines: {lines}")
        continue
    if out.endswith(".safetensors"):
        try:
            import safetensors.torch  # noqa: F401
        except ImportError:  # Debian 12 has no python3-safetensors: the same call on a reader of the format
            package, module = type(sys)("safetensors"), type(sys)("safetensors.torch")
            module.load_file = lambda f: read_safetensors(f)[0]
            package.torch = module
            sys.modules.update({"safetensors": package, "safetensors.torch": module})
    scope = {}
    try:
        exec(lines, scope)  # the user's lines, as printed
    except Exception as e:  # noqa: BLE001
        fail(f"the lines scdino-export printed for {out} failed: {type(e).__name__}: {e}\n{lines}")
        continue
    model = scope["model"].eval()
    with torch.no_grad():
        theirs = model(batch).numpy()
    diff = float(np.abs(theirs - ours).max())
    scale = float(np.abs(ours).max())
    print(f"{out}: {len(paths)} images, CLS of vision_transformer.py vs scdino-features: max |diff| {diff:.2e} "
          f"(values up to {scale:.2f})")
    if not diff < 1e-4:
        fail(f"{out}: the CLS tokens differ from scdino's by {diff:.3e} (> 1e-4)")

# An export never replaces a file unless asked.
p = run([bins["scdino-export"], "--checkpoint", checkpoint, "--out", f"{work}/vit.pth"], expect=2)
if "vit.pth exists; scdino-export does not replace it without --force" not in p.stderr:
    fail(f"no clear refusal of an existing file: {p.stderr}")
before = open(f"{work}/vit.pth", "rb").read()
run([bins["scdino-export"], "--checkpoint", checkpoint, "--out", f"{work}/vit.pth", "--key", "student", "--force"])
if open(f"{work}/vit.pth", "rb").read() == before:
    fail("--force --key student did not replace the teacher's export")
if json.load(open(f"{work}/vit.pth.json"))["checkpoint_key"] != "student":
    fail("vit.pth.json does not say student after --key student --force")
# A file without a teacher: the converter's output of a student alone.
tensors, meta = read_safetensors(f"{work}/vit.safetensors")
student = {f"student.backbone.{k}": v for k, v in tensors.items()}
write_safetensors(f"{work}/student_only.safetensors", student, {"model": meta["model"]})
p = run([bins["scdino-export"], "--checkpoint", f"{work}/student_only.safetensors", "--out", f"{work}/t.pth"], expect=2)
if "no 'teacher.backbone.*' tensors for checkpoint key 'teacher'; the file holds: student" not in p.stderr:
    fail(f"no clear error for a checkpoint without a teacher: {p.stderr}")
if os.path.exists(f"{work}/t.pth"):
    fail("a failed export left t.pth behind")
print("ok" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
