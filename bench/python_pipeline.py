"""The scDINO multi-crop recipe written with torchvision transforms in a
PyTorch DataLoader: the Python baseline of bench/run-data-bench.sh.

Per image: read the TIFF (tifffile), min-max each channel to [0, 1], then 2
global crops (RandomResizedCrop 224, scale (0.14, 1), bicubic) and 8 local
crops (96, scale (0.05, 0.14)), each with horizontal and vertical flips
(p 0.5), per-channel brightness U(0.5, 1.25) with p 0.8 (clamped), Gaussian
blur 5x5 sigma U(0.1, 1.5) (p 1.0 / 0.1 / 0.5), solarisation p 0.2 on the
second global crop, per-channel normalisation. Prints one JSON line.
"""
import argparse
import glob
import json
import os
import time

import numpy as np
import tifffile
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms as T
from torchvision.transforms import InterpolationMode


class Brightness:
    def __init__(self, lo=0.5, hi=1.25):
        self.lo, self.hi = lo, hi

    def __call__(self, x):
        f = torch.empty(x.shape[0], 1, 1).uniform_(self.lo, self.hi)
        return (x * f).clamp(0, 1)


class Solarize:
    def __call__(self, x):
        return torch.where(x > 0.5, 1 - x, x)


def view(size, scale, blur_p, solarize_p, mean, std):
    ops = [
        T.RandomResizedCrop(size, scale=scale, interpolation=InterpolationMode.BICUBIC),
        T.RandomHorizontalFlip(0.5),
        T.RandomVerticalFlip(0.5),
        T.RandomApply([Brightness()], p=0.8),
        T.RandomApply([T.GaussianBlur(5, sigma=(0.1, 1.5))], p=blur_p),
    ]
    if solarize_p > 0:
        ops.append(T.RandomApply([Solarize()], p=solarize_p))
    ops.append(T.Normalize(mean, std))
    return T.Compose(ops)


class MultiCrop(Dataset):
    def __init__(self, root, local_crops, global_size, local_size):
        self.files = sorted(glob.glob(os.path.join(root, "*", "*.tif")))
        mean, std = [0.5] * 5, [0.25] * 5
        self.g1 = view(global_size, (0.14, 1.0), 1.0, 0.0, mean, std)
        self.g2 = view(global_size, (0.14, 1.0), 0.1, 0.2, mean, std)
        self.local = view(local_size, (0.05, 0.14), 0.5, 0.0, mean, std)
        self.n_local = local_crops

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        a = tifffile.imread(self.files[i]).astype(np.float32)  # H x W x C
        x = torch.from_numpy(a).permute(2, 0, 1)
        lo = x.amin(dim=(1, 2), keepdim=True)
        hi = x.amax(dim=(1, 2), keepdim=True)
        x = torch.where(hi > lo, (x - lo) / (hi - lo).clamp_min(1e-30), torch.zeros_like(x))
        crops = [self.g1(x), self.g2(x)] + [self.local(x) for _ in range(self.n_local)]
        return crops, 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--global-size", type=int, default=224)
    p.add_argument("--local-size", type=int, default=96)
    p.add_argument("--local-crops", type=int, default=8)
    a = p.parse_args()
    torch.set_num_threads(1)
    ds = MultiCrop(a.data, a.local_crops, a.global_size, a.local_size)
    loader = DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers, drop_last=True,
                        persistent_workers=a.workers > 0, worker_init_fn=lambda _: torch.set_num_threads(1))
    images = batches = 0
    t0 = time.time()
    while batches < a.batches:
        for crops, _ in loader:
            images += crops[0].shape[0]
            batches += 1
            if batches >= a.batches:
                break
    secs = time.time() - t0
    print(json.dumps({"benchmark": "data_pipeline", "pipeline": "python-torchvision", "images": images,
                      "seconds": secs, "images_per_s": images / secs, "workers": a.workers, "batch": a.batch,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
