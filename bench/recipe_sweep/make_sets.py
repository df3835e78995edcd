#!/usr/bin/python3
"""Writes the recipe's held-out validation sets of real images (docs/training.md,
"Validation"): patches of the sample images Debian's python3-skimage ships,
one class per source image, as multi-channel TIFF files in class folders.

  /usr/bin/python3 bench/recipe_sweep/make_sets.py OUT_DIR

OUT_DIR/textures32: 10 classes x 180 patches of 32 x 32 px, 2 channels
  (intensity and Sobel edge magnitude, 16-bit): the shape of the held-out set
  the small-data recipe collapsed on (issue 29).
OUT_DIR/textures96: 6 classes x 60 patches of 96 x 96 px, 3 channels (RGB,
  8-bit; a grey source repeats its intensity).
Patches sit at seeded random positions and are turned by a random multiple
of 90 degrees, so two patches of one class rarely share many pixels.
"""
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


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_sets.py OUT_DIR")
    out = sys.argv[1]
    write_set(os.path.join(out, "textures32"),
              ["astronaut", "brick", "camera", "cell", "coffee", "coins", "grass", "gravel", "immunohistochemistry",
               "moon"], 32, 180, intensity_and_edges, seed=29)
    write_set(os.path.join(out, "textures96"),
              ["brick", "grass", "gravel", "hubble_deep_field", "immunohistochemistry", "retina"], 96, 60, rgb,
              seed=30)


if __name__ == "__main__":
    main()
