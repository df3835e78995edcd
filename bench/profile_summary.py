#!/usr/bin/python3
"""Sums a LibTorch profiler trace (scdino-bench-train-step --profile) per
operator: total self time, calls and share of the traced time, largest
first. Self time is an event's duration minus its children's on the same
thread, so nested operators are not counted twice. A trace with the GPU's
activity in it (LibTorch 2.x, Kineto) also gets the GPU's side: how much of
the traced time some kernel ran (the union over the streams), the kernels'
time by kind (matrix products, attention, copies, the rest) and the
kernels that took longest.

  /usr/bin/python3 bench/profile_summary.py TRACE.json [--top 25] [--steps N]

--steps N divides every time by the N steps the trace holds (ms a step).
"""
import argparse
import collections
import json

GPU = {"kernel", "gpu_memcpy", "gpu_memset"}
KINDS = (  # (kind, words of a kernel's name), first match wins
    ("attention", ("fmha", "flash", "attention", "sdpa", "cudnn_generated")),
    ("matrix product", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "wgmma", "sm90")),
    ("copy, fill", ("memcpy", "memset", "copy", "fill")),
    ("reduction, norm, softmax", ("reduce", "norm", "softmax", "sum", "welford")),
)


def kind_of(event):
    name = event["name"].lower()
    if event.get("cat") in ("gpu_memcpy", "gpu_memset"):
        return "copy, fill"
    for kind, words in KINDS:
        if any(w in name for w in words):
            return kind
    return "elementwise, other"


def union_us(intervals):
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def cpu_table(events, top, per):
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    self_time = collections.Counter()
    calls = collections.Counter()
    total = 0.0
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [end, name, child time]
        for e in evs:
            while stack and stack[-1][0] <= e["ts"]:
                end, name, child = stack.pop()
                self_time[name] -= child
            if stack:
                stack[-1][2] += e["dur"]
            else:
                total += e["dur"]
            self_time[e["name"]] += e["dur"]
            calls[e["name"]] += 1
            stack.append([e["ts"] + e["dur"], e["name"], 0.0])
        while stack:
            end, name, child = stack.pop()
            self_time[name] -= child
    print(f"{'operator (host)':48s} {'self ms':>10s} {'calls':>7s} {'share':>6s}")
    for name, t in self_time.most_common(top):
        print(f"{name[:48]:48s} {t / 1000 / per:10.1f} {calls[name] / per:7.0f} {t / max(total, 1e-9):6.1%}")


def gpu_tables(host, gpu, top, per):
    window = max(e["ts"] + e["dur"] for e in host) - min(e["ts"] for e in host) if host else 0.0
    busy = union_us([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    total = sum(e["dur"] for e in gpu)
    print()
    print(f"GPU busy {busy / 1000 / per:.1f} ms of {window / 1000 / per:.1f} ms traced"
          f" ({busy / max(window, 1e-9):.1%}); kernels {len(gpu) / per:.0f}, their time {total / 1000 / per:.1f} ms")
    kinds = collections.Counter()
    kind_calls = collections.Counter()
    for e in gpu:
        kinds[kind_of(e)] += e["dur"]
        kind_calls[kind_of(e)] += 1
    print(f"{'kind of kernel':48s} {'ms':>10s} {'calls':>7s} {'share':>6s}")
    for kind, t in kinds.most_common():
        print(f"{kind:48s} {t / 1000 / per:10.1f} {kind_calls[kind] / per:7.0f} {t / total:6.1%}")
    by_name = collections.Counter()
    calls = collections.Counter()
    for e in gpu:
        by_name[e["name"]] += e["dur"]
        calls[e["name"]] += 1
    print(f"{'kernel':48s} {'ms':>10s} {'calls':>7s} {'share':>6s}")
    for name, t in by_name.most_common(top):
        print(f"{name[:48]:48s} {t / 1000 / per:10.1f} {calls[name] / per:7.0f} {t / total:6.1%}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--steps", type=int, default=1, help="the steps the trace holds: times are per step")
    a = p.parse_args()
    data = json.load(open(a.trace))
    events = [e for e in (data["traceEvents"] if isinstance(data, dict) else data)
              if e.get("ph") == "X" and "dur" in e]
    gpu = [e for e in events if e.get("cat") in GPU]
    host = [e for e in events if e.get("cat") not in GPU and e.get("cat") != "gpu_user_annotation"]
    per = max(a.steps, 1)
    cpu_table(host, a.top, per)
    if gpu:
        gpu_tables(host, gpu, a.top, per)
    else:
        print("\nno GPU activity in the trace (a CPU run, or LibTorch 1.x's profiler)")


if __name__ == "__main__":
    main()
