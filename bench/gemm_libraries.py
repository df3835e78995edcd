"""oneDNN's sgemm against OpenBLAS on the matrix products of a DINO step.

Both libraries are called directly through ctypes (the ones Debian's
LibTorch loads: libdnnl.so.2 and the OpenBLAS behind libblas.so.3), row-major
float32, one call per product after two warm-up calls, and the results are
checked against each other. Why the step's products run on oneDNN:
docs/performance.md ("The oneDNN products and kept memory").

  OMP_NUM_THREADS=2 /usr/bin/python3 bench/gemm_libraries.py [--reps 10]

Prints one JSON line per product: its shape and each library's GFLOP/s.
"""
import argparse
import ctypes
import ctypes.util
import json
import time

import numpy as np

FLOAT_P = ctypes.POINTER(ctypes.c_float)

# (rows, cols, inner, transpose a, transpose b, what) of vit_tiny/16 with 16
# global crops of 197 tokens (3152 rows), 64 local crops of 37 (2368) and
# the head's 65536 x 256 last layer on 80 student rows.
PRODUCTS = [
    (3152, 576, 192, False, True, "qkv forward"),
    (3152, 192, 192, False, True, "proj forward"),
    (3152, 768, 192, False, True, "fc1 forward"),
    (3152, 192, 768, False, True, "fc2 forward"),
    (3152, 192, 576, False, False, "qkv input gradient"),
    (3152, 768, 192, False, False, "fc2 input gradient"),
    (3152, 192, 768, False, False, "fc1 input gradient"),
    (576, 192, 3152, True, False, "qkv weight gradient"),
    (768, 192, 3152, True, False, "fc1 weight gradient"),
    (192, 768, 3152, True, False, "fc2 weight gradient"),
    (2368, 576, 192, False, True, "qkv forward, local crops"),
    (80, 65536, 256, False, True, "last layer forward"),
    (80, 256, 65536, False, False, "last layer input gradient"),
    (65536, 256, 80, True, False, "last layer weight gradient"),
    (2048, 2048, 2048, False, False, "2048^3"),
]


def load():
    dnnl = ctypes.CDLL("libdnnl.so.2")
    dnnl.dnnl_sgemm.argtypes = [ctypes.c_char, ctypes.c_char] + [ctypes.c_int64] * 3 + [
        ctypes.c_float, FLOAT_P, ctypes.c_int64, FLOAT_P, ctypes.c_int64, ctypes.c_float, FLOAT_P, ctypes.c_int64]
    dnnl.dnnl_sgemm.restype = ctypes.c_int
    blas = ctypes.CDLL(ctypes.util.find_library("blas") or "libblas.so.3")
    blas.cblas_sgemm.argtypes = [ctypes.c_int] * 6 + [ctypes.c_float, FLOAT_P, ctypes.c_int, FLOAT_P, ctypes.c_int,
                                                      ctypes.c_float, FLOAT_P, ctypes.c_int]
    return dnnl, blas


def rate(call, flops, reps):
    call()
    call()
    t0 = time.perf_counter()
    for _ in range(reps):
        call()
    return flops * reps / (time.perf_counter() - t0) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    dnnl, blas = load()
    rng = np.random.default_rng(0)
    for m, n, k, ta, tb, what in PRODUCTS:
        a = rng.random((k, m) if ta else (m, k), dtype=np.float32)
        b = rng.random((n, k) if tb else (k, n), dtype=np.float32)
        c_dnnl = np.zeros((m, n), np.float32)
        c_blas = np.zeros((m, n), np.float32)
        pa, pb = a.ctypes.data_as(FLOAT_P), b.ctypes.data_as(FLOAT_P)
        lda, ldb = a.shape[1], b.shape[1]

        def call_dnnl():
            status = dnnl.dnnl_sgemm(b"T" if ta else b"N", b"T" if tb else b"N", m, n, k, 1.0, pa, lda, pb, ldb, 0.0,
                                     c_dnnl.ctypes.data_as(FLOAT_P), n)
            assert status == 0, f"dnnl_sgemm returned {status} for {what}"

        def call_blas():
            # CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112.
            blas.cblas_sgemm(101, 112 if ta else 111, 112 if tb else 111, m, n, k, 1.0, pa, lda, pb, ldb, 0.0,
                             c_blas.ctypes.data_as(FLOAT_P), n)

        flops = 2.0 * m * n * k
        onednn, openblas = rate(call_dnnl, flops, args.reps), rate(call_blas, flops, args.reps)
        scale = float(np.abs(c_blas).max())
        assert np.abs(c_dnnl - c_blas).max() <= 1e-5 * scale, f"{what}: the two libraries disagree"
        print(json.dumps({"product": what, "rows": m, "cols": n, "inner": k, "trans_a": ta, "trans_b": tb,
                          "onednn_gflops": round(onednn, 1), "openblas_gflops": round(openblas, 1)}))


if __name__ == "__main__":
    main()
