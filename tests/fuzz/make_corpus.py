#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/targets.h) into
corpus/<target>/, and the hostile inputs found by review into crashes/:
every layout each reader accepts, small, so a fuzzer starts from all of them.
Rerun only to change the seeds; they are checked in.

    /usr/bin/python3 tests/fuzz/make_corpus.py BUILD_DIR   # its scdino-synth and scdino-pack
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import tifffile

here = os.path.dirname(os.path.abspath(__file__))
build = sys.argv[1]
rng = np.random.default_rng(49)
SEP = b"\n@@scdino-fuzz-file@@\n"


def target_dir(kind, name):
    d = os.path.join(here, kind, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def tiny_tiff(tags, data=b""):
    """Little-endian TIFF, one page; tags: (tag, type, values), type 3/4/5."""
    size = {3: 2, 4: 4, 5: 8}
    extra_at = 8 + 2 + 12 * len(tags) + 4
    d, extra = struct.pack("<H", len(tags)), b""
    for tag, typ, vals in tags:
        v = b"".join(struct.pack("<H" if typ == 3 else "<I", x) for x in vals)
        count = len(vals) // 2 if typ == 5 else len(vals)
        d += struct.pack("<HHI", tag, typ, count)
        if len(v) <= 4:
            d += v.ljust(4, b"\0")
        else:
            d += struct.pack("<I", extra_at + len(extra))
            extra += v
    return b"II*\0" + struct.pack("<I", 8) + d + struct.pack("<I", 0) + extra + data


def data_offset(tags):
    n = sum(len(v) * (2 if t == 3 else 4) for _, t, v in tags if len(v) * (2 if t == 3 else 4) > 4)
    return 8 + 2 + 12 * len(tags) + 4 + n


# TIFF: stripped, tiled, planes, pages, bit depths, compression, ImageJ, YCbCr.
d = target_dir("corpus", "tiff")
h, w = 12, 10
u8 = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
u16 = rng.integers(0, 65536, (h, w, 5), dtype=np.uint16)
f32 = rng.standard_normal((h, w, 2)).astype(np.float32)
tifffile.imwrite(f"{d}/single_u8.tif", u8[..., 0])
tifffile.imwrite(f"{d}/contig_u8.tif", u8, photometric="minisblack", planarconfig="contig")
tifffile.imwrite(f"{d}/contig_u16.tif", u16, photometric="minisblack", planarconfig="contig")
tifffile.imwrite(f"{d}/separate_u16.tif", np.moveaxis(u16, -1, 0), photometric="minisblack", planarconfig="separate")
tifffile.imwrite(f"{d}/pages_u8.tif", np.moveaxis(u8, -1, 0), photometric="minisblack")
tifffile.imwrite(f"{d}/hwc_default_u8.tif", u8)
tifffile.imwrite(f"{d}/pages_f32.tif", np.moveaxis(f32, -1, 0), photometric="minisblack")
tifffile.imwrite(f"{d}/deflate_u16.tif", u16, photometric="minisblack", compression="zlib")
tifffile.imwrite(f"{d}/rgb_u8.tif", u8, photometric="rgb")
tifffile.imwrite(f"{d}/imagej_cyx_u16.tif", np.moveaxis(u16, -1, 0)[None, :, None], imagej=True)
tifffile.imwrite(f"{d}/strips_u8.tif", u8, photometric="minisblack", rowsperstrip=5)
big = rng.integers(0, 256, (20, 18, 2), dtype=np.uint8)
tifffile.imwrite(f"{d}/tiled_contig_u8.tif", big, photometric="minisblack", tile=(16, 16))
tifffile.imwrite(f"{d}/tiled_separate_u16.tif", np.moveaxis(big.astype(np.uint16) * 257, -1, 0),
                 photometric="minisblack", planarconfig="separate", tile=(16, 16))
tifffile.imwrite(f"{d}/tiled_deflate_f32.tif", big.astype(np.float32), photometric="minisblack", tile=(16, 16),
                 compression="zlib")
tifffile.imwrite(f"{d}/tiled_pages_u16.tif", np.moveaxis(big.astype(np.uint16), -1, 0), photometric="minisblack",
                 tile=(16, 16))
# The other sample types, from the arrays above (no new draws): signed 8 and
# 16 bits (big-endian too), 16- and 64-bit floats.
tifffile.imwrite(f"{d}/contig_i16.tif", (u16.astype(np.int32) - 32768).astype(np.int16), photometric="minisblack",
                 planarconfig="contig")
tifffile.imwrite(f"{d}/bigendian_i8.tif", (u8.astype(np.int16) - 128).astype(np.int8), photometric="minisblack",
                 byteorder=">")
tifffile.imwrite(f"{d}/contig_f16.tif", f32.astype(np.float16), photometric="minisblack")
tifffile.imwrite(f"{d}/pages_f64.tif", np.moveaxis(f32.astype(np.float64), -1, 0), photometric="minisblack")
# Uncompressed YCbCr, 2 x 2 subsampling, one 64 x 64 tile (6,144 bytes) over
# a 40 x 36 image.
tags = [(256, 4, [40]), (257, 4, [36]), (258, 3, [8, 8, 8]), (259, 3, [1]), (262, 3, [6]), (277, 3, [3]),
        (284, 3, [1]), (322, 4, [64]), (323, 4, [64]), (324, 4, [0]), (325, 4, [6144]), (530, 3, [2, 2]),
        (532, 5, [0, 1, 255, 1, 128, 1, 255, 1, 128, 1, 255, 1])]
tags[9] = (324, 4, [data_offset(tags)])
open(f"{d}/ycbcr_tiled.tif", "wb").write(tiny_tiff(tags, bytes(rng.integers(0, 256, 6144, dtype=np.uint8))))

c = target_dir("crashes", "tiff")
tags = [(256, 4, [16]), (257, 4, [16]), (258, 3, [8]), (259, 3, [1]), (262, 3, [1]), (277, 3, [1]),
        (322, 4, [1 << 20]), (323, 4, [1 << 20]), (324, 4, [0]), (325, 4, [256])]
tags[8] = (324, 4, [data_offset(tags)])
open(f"{c}/terabyte-tile.tif", "wb").write(tiny_tiff(tags, b"\x7f" * 256))
tags = [(256, 4, [30000]), (257, 4, [30000]), (258, 3, [8]), (259, 3, [1]), (262, 3, [1]), (273, 4, [0]),
        (277, 3, [1]), (278, 4, [30000]), (279, 4, [256])]
tags[5] = (273, 4, [data_offset(tags)])
open(f"{c}/900-megabyte-strips.tif", "wb").write(tiny_tiff(tags, b"\1" * 256))
# The subsampled tile the old copy read past (16 x 16 tiles: 384 bytes).
tags = [(256, 4, [32]), (257, 4, [32]), (258, 3, [8, 8, 8]), (259, 3, [1]), (262, 3, [6]), (277, 3, [3]),
        (284, 3, [1]), (322, 4, [16]), (323, 4, [16]), (324, 4, [0, 0, 0, 0]), (325, 4, [384] * 4),
        (530, 3, [2, 2])]
at = data_offset(tags)
tags[9] = (324, 4, [at + 384 * t for t in range(4)])
open(f"{c}/ycbcr-subsampled-384-byte-tiles.tif", "wb").write(tiny_tiff(tags, b"\x40" * 1536))


# safetensors: every dtype the reader takes, metadata, an empty tensor.
def safetensors(tensors, metadata=None):
    header, data = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


d = target_dir("corpus", "safetensors")
arrays = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "I16": np.int16, "I8": np.int8, "U8": np.uint8, "U16": np.uint16, "BOOL": np.bool_}
all_dtypes = {}
for name, t in arrays.items():
    a = (rng.standard_normal((2, 3)) * 10).astype(t)
    all_dtypes[name.lower()] = (name, [2, 3], a.tobytes())
    open(f"{d}/{name.lower()}.safetensors", "wb").write(safetensors({"x": (name, [2, 3], a.tobytes())}))
all_dtypes["bf16"] = ("BF16", [4], np.arange(4, dtype=np.uint16).tobytes())
open(f"{d}/every_dtype.safetensors", "wb").write(
    safetensors(all_dtypes, {"iteration": "12", "classes": "[\"a\",\"b\"]"}))
open(f"{d}/empty_and_scalar.safetensors", "wb").write(
    safetensors({"e": ("F32", [0, 3], b""), "s": ("I64", [], struct.pack("<q", 7))}))
c = target_dir("crashes", "safetensors")
open(f"{c}/empty-tensor-overflowing-strides.safetensors", "wb").write(
    safetensors({"x": ("F32", [1 << 32, 1 << 32, 0], b"")}))
overlap = {"__metadata__": {}}
for i in range(64):  # 64 tensors over the same 4 KiB: each would be a copy of it
    overlap[f"t{i}"] = {"dtype": "U8", "shape": [4096], "data_offsets": [0, 4096]}
h = json.dumps(overlap).encode()
open(f"{c}/tensors-sharing-their-bytes.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 4096)

# .npy: the dtypes the reader takes, shapes, format versions 1 and 2.
d = target_dir("corpus", "npy")
for t in ("<f4", "<f8", "<i4", "<i8"):
    np.save(f"{d}/matrix{t[1:]}.npy", (rng.standard_normal((5, 3)) * 100).astype(t))
np.save(f"{d}/scalar.npy", np.float32(3.5))
np.save(f"{d}/empty.npy", np.zeros((0, 4), np.float32))
np.save(f"{d}/cube.npy", np.arange(24, dtype=np.int64).reshape(2, 3, 4))
with open(f"{d}/version2.npy", "wb") as f:
    np.lib.format.write_array(f, np.ones((3, 2), np.float32), version=(2, 0))
c = target_dir("crashes", "npy")
with open(f"{c}/empty-array-overflowing-strides.npy", "wb") as f:
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 0), }"
    header += " " * ((64 - (len(header) + 11) % 64) % 64) + "\n"
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())

# Packed sets: two tiny sets packed by scdino-pack (8- and 16-bit).
d = target_dir("corpus", "packed")
with tempfile.TemporaryDirectory() as tmp:
    for bits in (8, 16):
        data, out = f"{tmp}/data{bits}", f"{tmp}/packed{bits}"
        subprocess.run([f"{build}/services/tools/scdino-synth", "--out", data, "--classes", "2", "--per-class", "3",
                        "--channels", "2", "--size", "8", "--seed", "1", "--bits", str(bits)], check=True,
                       capture_output=True)
        cfg = f"{tmp}/c{bits}.yaml"
        open(cfg, "w").write(f'meta: {{name_of_run: r, output_dir: "{tmp}/runs", dataset_dir: "{data}", '
                             f'selected_channel_combination_per_run: ["01"]}}\n')
        subprocess.run([f"{build}/services/tools/scdino-pack", "--config", cfg, "--out", out, "--block", "2",
                        "--threads", "1"], check=True, capture_output=True)
        shards = sorted(f for f in os.listdir(out) if f.startswith("shard-") and f.endswith(".tar"))
        assert shards == ["shard-00000.tar"], shards
        parts = [open(f"{out}/{f}", "rb").read() for f in ("pack.json", "index.csv", shards[0])]
        open(f"{d}/packed_u{bits}.bin", "wb").write(SEP.join(parts))

# PNG and JPEG: grey, RGB, RGBA, 16-bit and palette PNGs, written here
# (zlib, no encoder library), and the smallest baseline JPEG (8 x 8 grey,
# one Huffman code each for DC and AC). Crashes: headers claiming more than
# their file holds.
def png(width, height, depth, colour, rows, extra=b""):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    raw = b"".join(b"\0" + r for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)) +
            extra + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def jpeg(width, height, components=1, data=b"\x3f"):
    seg = lambda m, body: b"\xff" + bytes([m]) + struct.pack(">H", len(body) + 2) + body
    comps = b"".join(bytes([i + 1, 0x11, 0]) for i in range(components))
    return (b"\xff\xd8" + seg(0xDB, b"\0" + b"\1" * 64) +
            seg(0xC0, struct.pack(">BHHB", 8, height, width, components) + comps) +
            seg(0xC4, b"\x00" + b"\x01" + b"\0" * 15 + b"\x00") +  # DC table 0: one 1-bit code, category 0
            seg(0xC4, b"\x10" + b"\x01" + b"\0" * 15 + b"\x00") +  # AC table 0: one 1-bit code, end of block
            seg(0xDA, bytes([components]) + b"".join(bytes([i + 1, 0]) for i in range(components)) + b"\0\x3f\0") +
            data + b"\xff\xd9")


d = target_dir("corpus", "png")
grey = rng.integers(0, 256, (6, 5), dtype=np.uint8)
open(f"{d}/grey_u8.png", "wb").write(png(5, 6, 8, 0, [r.tobytes() for r in grey]))
rgb = rng.integers(0, 256, (4, 3, 3), dtype=np.uint8)
open(f"{d}/rgb_u8.png", "wb").write(png(3, 4, 8, 2, [r.tobytes() for r in rgb]))
rgba16 = rng.integers(0, 65536, (3, 4, 4), dtype=np.uint16).astype(">u2")
open(f"{d}/rgba_u16.png", "wb").write(png(4, 3, 16, 6, [r.tobytes() for r in rgba16]))
plte = struct.pack(">I", 12) + b"PLTE" + bytes(range(12)) + struct.pack(">I", zlib.crc32(b"PLTE" + bytes(range(12))))
open(f"{d}/palette_u8.png", "wb").write(png(4, 2, 8, 3, [bytes([0, 1, 2, 3]), bytes([3, 2, 1, 0])], plte))
c = target_dir("crashes", "png")
open(f"{c}/32768-square-rgba16-in-a-tiny-file.png", "wb").write(png(32768, 32768, 16, 6, [b""]))
d = target_dir("corpus", "jpeg")
open(f"{d}/grey_8x8.jpg", "wb").write(jpeg(8, 8))
open(f"{d}/grey_16x8.jpg", "wb").write(jpeg(16, 8, data=b"\x0f"))
c = target_dir("crashes", "jpeg")
open(f"{c}/65535-square-in-a-tiny-file.jpg", "wb").write(jpeg(65535, 65535, 3))

# Configs: the shipped ones (configs/, given to the replay as they are) and
# each data source and section in a small one.
d = target_dir("corpus", "config")
open(f"{d}/synthetic.yaml", "w").write(
    'meta: {name_of_run: r, output_dir: out, selected_channel_combination_per_run: ["012"]}\n'
    "scdino: {data_source: synthetic, device: cpu, on_bad_image: skip}\n")
open(f"{d}/csv.yaml", "w").write(
    'meta: {name_of_run: r, output_dir: out, selected_channel_combination_per_run: ["0"]}\n'
    "scdino: {data_source: csv, index_csv: cells.csv, split: {mode: folders}}\n"
    "train_scDINO: {epochs: 3, batch_size_per_gpu: 4, hyperparameters: {lr: 0.0005, warmup_epochs: 1, global_crops_scale: [0.4, 1.0]}}\n")
print("corpora written:", {k: len(os.listdir(os.path.join(here, "corpus", k))) for k in os.listdir(os.path.join(here, "corpus"))})
