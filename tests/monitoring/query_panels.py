#!/usr/bin/env python3
"""Sends every query of every dashboard to a live Prometheus, as Grafana would.

Variables are resolved in order from the data (label_values through the
series API), with --var NAME=VALUE preferred when the data has that value and
"All" (the variable's allValue) where the variable offers it. Range panels
are asked over [--start, now], instant ones at now. Every query must return
at least one series; one that returns none is asked again (as a dashboard
refreshes) for --patience seconds, then prints
"FAIL: <dashboard> / <panel> / <refId>: ..." and the samples Prometheus
holds for its metrics. With --cpu, a query whose scdino
metrics are all "CUDA only" in docs/metrics.md may return none.

    query_panels.py --prometheus URL --source DIR --start UNIX_TIME [--var NAME=VALUE]... [--cpu] [--patience S]
"""
import argparse
import glob
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("--prometheus", required=True)
ap.add_argument("--source", required=True)
ap.add_argument("--start", type=float, required=True)
ap.add_argument("--var", action="append", default=[])
ap.add_argument("--cpu", action="store_true")
ap.add_argument("--patience", type=float, default=20)
args = ap.parse_args()
wanted = dict(v.split("=", 1) for v in args.var)
now = time.time()
builtins = {"__rate_interval": "10s", "__interval": "2s", "__range": f"{int(now - args.start) + 60}s"}

with open(os.path.join(args.source, "docs", "metrics.md"), encoding="utf-8") as f:
    cuda_only = {m.group(1) for m in re.finditer(r"^\|\s*`(scdino_[^`]+)`.*CUDA only", f.read(), re.M)}


def api(path, **params):
    url = f"{args.prometheus}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return json.load(r)["data"], None
    except urllib.error.HTTPError as e:
        return None, json.load(e).get("error", str(e))


def substitute(text, values):
    def one(m):
        name = m.group(1) or m.group(2)
        return values.get(name, m.group(0))
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", one, text)


failures, skipped, pending, panels = [], [], [], 0
for path in sorted(glob.glob(os.path.join(args.source, "monitoring", "grafana", "dashboards", "*.json"))):
    name = os.path.basename(path)
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    values = dict(builtins)
    for v in d["templating"]["list"]:
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q)
        selector = substitute(m.group(1), values)
        data, error = api("series", **{"match[]": selector, "start": args.start, "end": now})
        found = sorted({s.get(m.group(2), "") for s in data or []} - {""})
        if v.get("regex"):
            # As Grafana applies a variable's regex: a value that matches
            # gives its first group (or the whole match); others are left out.
            pattern = re.compile(re.fullmatch(r"/(.*)/\w*", v["regex"]).group(1))
            kept = [pattern.search(x) for x in found]
            found = sorted({k.group(1) if k.groups() else k.group(0) for k in kept if k} - {""})
        if not found:
            failures.append(f"FAIL: {name} / variable {v['name']}: {selector} has no {m.group(2)} "
                            f"{'(' + error + ')' if error else ''}")
            values[v["name"]] = "no-value"
            continue
        if wanted.get(v["name"]) in found:
            values[v["name"]] = wanted[v["name"]]
        elif v.get("includeAll"):
            values[v["name"]] = v.get("allValue") or "|".join(found)
        else:
            values[v["name"]] = found[0]
    print(f"{name}: variables " + ", ".join(f"{v['name']}={values[v['name']]}" for v in d["templating"]["list"]))
    for p in d["panels"]:
        if p["type"] == "row":
            continue
        panels += 1
        for t in p["targets"]:
            pending.append((f"{name} / {p['title']} / {t['refId']}", substitute(t["expr"], values), t))


def ask(expr, target):
    """The query as Grafana sends it now: (series, error)."""
    end = time.time()
    if target.get("instant"):
        data, error = api("query", query=expr, time=end)
    else:
        data, error = api("query_range", query=expr, start=args.start, end=end, step=2)
    return (data or {}).get("result", []), error


def samples(expr):
    """What Prometheus holds for the scdino metrics of a query: a line each."""
    lines = []
    for metric in sorted(set(re.findall(r"scdino_\w+", expr))):
        data, _ = api("query", query=f"{metric}[60s]", time=time.time())
        for r in data["result"] if data else []:
            ts = [float(v[0]) for v in r["values"]]
            gaps = sorted({round(b - a, 1) for a, b in zip(ts, ts[1:])})
            lines.append(f"  {metric}{{service={r['metric'].get('service')}, instance={r['metric'].get('instance')}}}: "
                         f"{len(ts)} samples in the last 60 s, gaps {gaps}")
        if not data or not data["result"]:
            lines.append(f"  {metric}: no samples in the last 60 s")
    return lines


# A panel refreshes: a query that has no series yet (a target that joined a
# few scrapes ago, whose rate needs two samples in its window) is asked again
# for up to --patience seconds before it fails; the samples Prometheus holds
# for its metrics are printed with the failure.
waiting = []
for where, expr, target in pending:
    result, error = ask(expr, target)
    if error:
        failures.append(f"FAIL: {where}: {error}: {expr}")
    elif not result:
        metrics = set(re.findall(r"scdino_\w+", target["expr"]))
        if args.cpu and metrics and metrics <= cuda_only:
            skipped.append(where)
        else:
            waiting.append((where, expr, target))
deadline = time.time() + args.patience
while waiting and time.time() < deadline:
    time.sleep(2)
    waiting = [w for w in waiting if not ask(w[1], w[2])[0]]
for where, expr, _ in waiting:
    failures.append(f"FAIL: {where}: no series after {args.patience:g} s: {expr}")
    failures.extend(samples(expr))

for line in failures:
    print(line)
for where in skipped:
    print(f"skip: {where}: CUDA only, the trainer ran on the CPU")
print(f"{'FAILED' if failures else 'ok'}: {panels} panels queried, "
      f"{sum(line.startswith('FAIL:') for line in failures)} queries without series or "
      f"failing, {len(skipped)} CUDA-only queries skipped")
sys.exit(1 if failures else 0)
