#!/usr/bin/env python3
"""Kernel CPU to write a new file, by the size of each write(2).

The page cache sizes the folio it adds from a write's length: a write of
2 MiB or more gets 2 MiB folios. On a VM that hands freed 2 MiB blocks back
to its host (free page reporting, as on the build machines here), each such
folio is a block the host must back again, and a new file written in big
writes costs many times the kernel CPU of one written in 1 MiB writes. This
measures it where it runs: each piece size in turn, interleaved, every file
new, with a pause before each write so that what the previous file freed is
reported first (common/env.cc writes in 1 MiB pieces for this;
docs/performance.md#writes-in-1-mib-pieces).

    /usr/bin/python3 bench/write_pieces.py [--dir DIR] [--mib 120] [--rounds 3] [--pause 10]
"""
import argparse
import os
import resource
import statistics
import tempfile
import time

PIECES = [("64 KiB", 64 << 10), ("256 KiB", 256 << 10), ("512 KiB", 512 << 10), ("1 MiB", 1 << 20),
          ("2 MiB", 2 << 20), ("4 MiB", 4 << 20), ("one write", 0)]


def kernel_cpu():
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def write_new_file(path, data, piece):
    piece = piece or len(data)
    view = memoryview(data)
    t0, s0 = time.monotonic(), kernel_cpu()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        done = 0
        while done < len(data):
            done += os.write(fd, view[done:done + piece])
    finally:
        os.close(fd)
    return time.monotonic() - t0, kernel_cpu() - s0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=os.environ.get("TMPDIR", "/var/tmp"), help="where the files are written")
    ap.add_argument("--mib", type=int, default=120, help="each file's size (120: about a vit_tiny checkpoint)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pause", type=float, default=10.0, help="seconds before each write")
    args = ap.parse_args()
    if args.mib < 1 or args.rounds < 1 or args.pause < 0:
        ap.error("--mib and --rounds must be at least 1, --pause at least 0")
    if not os.path.isdir(args.dir):
        ap.error("--dir %s is not a directory" % args.dir)
    data = os.urandom(args.mib << 20)
    results = {name: [] for name, _ in PIECES}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="write-pieces-") as work:
        n = 0
        for _ in range(args.rounds):
            for name, piece in PIECES:
                time.sleep(args.pause)
                path = os.path.join(work, "f%d" % n)
                n += 1
                results[name].append(write_new_file(path, data, piece))
                os.unlink(path)
    print("a new %d MiB file in %s, %d rounds (median; kernel CPU from getrusage):" % (args.mib, args.dir, args.rounds))
    print("| each write | wall s | kernel CPU s | kernel CPU s per GiB | each round's kernel CPU s |")
    print("|---|---|---|---|---|")
    for name, _ in PIECES:
        wall = statistics.median(r[0] for r in results[name])
        sys_s = statistics.median(r[1] for r in results[name])
        each = " ".join("%.2f" % r[1] for r in results[name])
        print("| %s | %.2f | %.2f | %.1f | %s |" % (name, wall, sys_s, sys_s * 1024 / args.mib, each))


if __name__ == "__main__":
    main()
