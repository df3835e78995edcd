#!/usr/bin/python3
"""Writes the tiled TIFFs of image_io_test.cc with tifffile, as a microscopy
tool would, and each one's expected H x W x C array as .npy (int32 for 8- and
16-bit samples, float32 for float). 40 x 24 images in 16 x 16 tiles: six tiles
a plane, the right and bottom ones cut by the image's edge. Rerun (with
Debian's python3-tifffile) only to change the fixtures; they are checked in.
"""
import os

import numpy as np
import tifffile

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(50)


def write(name, array, expected, **kw):
    tifffile.imwrite(os.path.join(here, name + ".tif"), array, tile=(16, 16), **kw)
    back = tifffile.imread(os.path.join(here, name + ".tif"))
    assert np.array_equal(back, array), name
    out = expected.astype(np.float32 if expected.dtype.kind == "f" else np.int32)
    np.save(os.path.join(here, name + ".npy"), np.ascontiguousarray(out))


h, w = 24, 40
u8 = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
write("tiled_contig_u8", u8, u8, photometric="minisblack", planarconfig="contig")
u16 = rng.integers(0, 65536, (h, w, 5), dtype=np.uint16)
write("tiled_contig_u16", u16, u16, photometric="minisblack", planarconfig="contig")
sep = rng.integers(0, 65536, (5, h, w), dtype=np.uint16)
write("tiled_separate_u16", sep, np.moveaxis(sep, 0, -1), photometric="minisblack", planarconfig="separate")
f32 = rng.standard_normal((h, w, 2)).astype(np.float32)
write("tiled_contig_f32", f32, f32, photometric="minisblack", planarconfig="contig")
z8 = rng.integers(0, 4, (h, w, 4), dtype=np.uint8)
write("tiled_deflate_u8", z8, z8, photometric="minisblack", planarconfig="contig", compression="zlib")
pages = rng.integers(0, 65536, (3, h, w), dtype=np.uint16)
write("tiled_pages_u16", pages, np.moveaxis(pages, 0, -1), photometric="minisblack")
