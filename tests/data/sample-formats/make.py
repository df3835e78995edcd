#!/usr/bin/python3
"""Writes the TIFFs of image_io_test.cc's SampleFormat cases with tifffile, as
microscopy tools store such images (signed 8-, 16- and 32-bit integers,
unsigned 32-bit, 16- and 64-bit floats; interleaved, separate planes, a page
per channel, tiled and deflated), each with its expected H x W x C array as
.npy in float32, the dtype the reader decodes them to. 9 x 7 images. Rerun
(with Debian's python3-tifffile) only to change the fixtures; they are
checked in.
"""
import os

import numpy as np
import tifffile

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(62)
h, w = 9, 7


def write(name, array, hwc, **kw):
    tifffile.imwrite(os.path.join(here, name + ".tif"), array, photometric="minisblack", **kw)
    back = tifffile.imread(os.path.join(here, name + ".tif"))
    assert back.dtype == array.dtype and np.array_equal(back, array), name
    np.save(os.path.join(here, name + ".npy"), np.ascontiguousarray(hwc.astype(np.float32)))


def ints(dtype, c):
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (h, w, c), dtype=dtype, endpoint=True)
    a[0, 0] = info.min  # the extremes, where a wrong signedness or width shows
    a[0, 1] = info.max
    return a


i8 = ints(np.int8, 3)
write("contig_i8", i8, i8, planarconfig="contig")
i16 = ints(np.int16, 5)
write("contig_i16", i16, i16, planarconfig="contig")
write("separate_i16", np.moveaxis(i16, -1, 0), i16, planarconfig="separate")
write("pages_i16", np.moveaxis(i16, -1, 0), i16)
i32 = ints(np.int32, 2)
write("contig_i32", i32, i32, planarconfig="contig")
u32 = ints(np.uint32, 2)
write("contig_u32", u32, u32, planarconfig="contig")
f16 = rng.standard_normal((h, w, 3)).astype(np.float16)
write("contig_f16", f16, f16, planarconfig="contig")
f64 = rng.standard_normal((h, w, 4)) * 1e3
write("contig_f64", f64, f64, planarconfig="contig")
write("pages_f64", np.moveaxis(f64, -1, 0), f64)
write("tiled_deflate_f64", f64, f64, planarconfig="contig", tile=(16, 16), compression="zlib")
# A big-endian file: libtiff hands the samples over in the machine's order.
write("bigendian_i16", i16, i16, planarconfig="contig", byteorder=">")
# Refused, naming the type: complex samples (no image of cells is complex).
c64 = (rng.standard_normal((h, w)) + 1j * rng.standard_normal((h, w))).astype(np.complex64)
tifffile.imwrite(os.path.join(here, "refused_complex64.tif"), c64, photometric="minisblack")
