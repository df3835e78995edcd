#!/usr/bin/python3
"""Sums a LibTorch profiler trace (scdino-bench-train-step --profile) per
operator: total self time, calls and share of the traced time, largest
first. Self time is an event's duration minus its children's on the same
thread, so nested operators are not counted twice.

  /usr/bin/python3 bench/profile_summary.py TRACE.json [--top 25]
"""
import argparse
import collections
import json


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    data = json.load(open(a.trace))
    events = [e for e in (data["traceEvents"] if isinstance(data, dict) else data) if e.get("ph") == "X"]
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[e.get("tid")].append(e)
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
    print(f"{'operator':48s} {'self ms':>10s} {'calls':>7s} {'share':>6s}")
    for name, t in self_time.most_common(a.top):
        print(f"{name[:48]:48s} {t / 1000:10.1f} {calls[name]:7d} {t / total:6.1%}")


if __name__ == "__main__":
    main()
