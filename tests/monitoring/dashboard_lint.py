#!/usr/bin/env python3
"""Checks everything Grafana reads from monitoring/grafana without a Grafana.

Dashboards: JSON structure, unique uids and panel ids, a query and a unit on
every panel, the provisioned Prometheus data source uid on every panel, query
and variable, $__rate_interval in rates, no constant (vector()) queries,
known variables only, every PromQL expression parsing (promtool, variables
substituted), every scdino_* metric exported by services/ and documented in
docs/metrics.md, every recording rule defined in monitoring/prometheus, every
other metric named in docs/monitoring.md. Provisioning: the data source uid
and the dashboards path that deploy/head-node/compose.yml mounts.

    python3 tests/monitoring/dashboard_lint.py SOURCE_DIR

Prints "FAIL: <dashboard> / <panel> ..." per problem and exits 1 if any.
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

src = sys.argv[1]
failures = []


def fail(where, msg):
    failures.append(f"FAIL: {where}: {msg}")


def read(path):
    with open(os.path.join(src, path), encoding="utf-8") as f:
        return f.read()


# --- provisioning ----------------------------------------------------------
prov = os.path.join("monitoring", "grafana", "provisioning")
ds_text = "".join(read(p) for p in sorted(glob.glob(os.path.join(src, prov, "datasources", "*.yml"))))
prom_uids = [m.group(1) for m in re.finditer(r"^\s+uid:\s*(\S+)\s*\n\s+type:\s*prometheus\s*$", ds_text, re.M)]
if len(prom_uids) != 1:
    fail(prov + "/datasources", f"expected one Prometheus data source with a uid (uid: then type:), got {prom_uids}")
    prom_uid = None
else:
    prom_uid = prom_uids[0]
dash_prov = "".join(read(p) for p in sorted(glob.glob(os.path.join(src, prov, "dashboards", "*.yml"))))
m = re.search(r"^\s+path:\s*(\S+)\s*$", dash_prov, re.M)
if not m:
    fail(prov + "/dashboards", "no dashboards provider path")
elif m.group(1) not in read("deploy/head-node/compose.yml"):
    fail("deploy/head-node/compose.yml", f"does not mount the dashboards at the provider's path {m.group(1)}")

# --- what metric names may be used -------------------------------------------
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metric_docs  # noqa: E402

documented, histograms = metric_docs.documented(src)
literals = metric_docs.literals(src)


recorded = set()
for path in glob.glob(os.path.join(src, "monitoring", "prometheus", "*.yml")):
    with open(path, encoding="utf-8") as f:
        recorded.update(re.findall(r"^\s*-?\s*record:\s*(\S+)", f.read(), re.M))
monitoring_md = read("docs/monitoring.md")

BUILTINS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms", "__dashboard",
            "__from", "__to", "__name"}


def substitute(expr):
    """What Prometheus would receive, near enough: variables become values."""
    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m").replace("$__range", "1h")
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", "lint", expr)


def metric_names(expr):
    names = set()
    for regex in re.findall(r'__name__\s*=~\s*"([^"]*)"', expr):
        # Alternations of literal names only, so every name can be checked.
        if re.search(r"[.*+?\[\]\\^$]", regex):
            names.add("?" + regex)
            continue
        options = [""]
        for part in re.split(r"(\([^()]*\))", regex):
            alts = part[1:-1].split("|") if part.startswith("(") else [part]
            options = [o + a for o in options for a in alts]
        names.update(options)
    # Strings, label matchers and label lists hold label names, not metrics.
    expr = re.sub(r'"[^"]*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    for token in re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if ":" in token or re.match(r"(scdino|DCGM|slurm|node)_\w*[A-Za-z0-9]$", token):
            names.add(token)
    return names


def check_name(where, name):
    if name.startswith("?"):
        fail(where, f"__name__ regex {name[1:]!r} is not a plain alternation of names: it cannot be checked")
    elif ":" in name:
        if name not in recorded:
            fail(where, f"recording rule {name} is not defined in monitoring/prometheus/*.yml")
    elif name.startswith("scdino_"):
        base = metric_docs.base(name, histograms)
        if base not in documented:
            fail(where, f"{base} is not documented in docs/metrics.md")
        if not metric_docs.exported(base, literals):
            fail(where, f"{base} is not exported by anything under services/")
    elif name not in monitoring_md:
        fail(where, f"{name} is not named in docs/monitoring.md")


# --- dashboards --------------------------------------------------------------
exprs = []  # (where, expression with variables substituted)
uids = {}
dashboards = sorted(glob.glob(os.path.join(src, "monitoring", "grafana", "dashboards", "*.json")))
if len(dashboards) < 4:
    fail("monitoring/grafana/dashboards", f"expected the 4 dashboards of docs/monitoring.md, found {len(dashboards)}")
panel_count = 0
for path in dashboards:
    name = os.path.basename(path)
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except ValueError as e:
        fail(name, f"not JSON: {e}")
        continue
    for key in ("uid", "title", "panels", "templating", "schemaVersion"):
        if key not in d:
            fail(name, f"no {key}")
    if d.get("uid") in uids:
        fail(name, f"uid {d.get('uid')} is also the uid of {uids[d.get('uid')]}")
    uids[d.get("uid")] = name
    variables = {v.get("name"): v for v in d.get("templating", {}).get("list", [])}
    for v in variables.values():
        where = f"{name} / variable {v.get('name')}"
        if v.get("type") != "query":
            continue
        if (v.get("datasource") or {}).get("uid") != prom_uid:
            fail(where, f"data source is not the provisioned uid {prom_uid}")
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", q or "")
        if not m:
            fail(where, f"query {q!r} is not label_values(<selector>, <label>)")
            continue
        exprs.append((where, substitute(m.group(1))))
        for metric in metric_names(m.group(1)):
            check_name(where, metric)
    known = set(variables) | BUILTINS
    panels = list(d.get("panels", []))
    ids, titles = set(), set()
    for p in panels:
        panels.extend(p.get("panels", []))  # collapsed rows keep theirs
        title = p.get("title", "")
        where = f"{name} / {title or '(untitled)'}"
        if p.get("id") in ids:
            fail(where, f"panel id {p.get('id')} is not unique")
        ids.add(p.get("id"))
        if not {"h", "w", "x", "y"} <= set(p.get("gridPos", {})):
            fail(where, "no gridPos")
        if p.get("type") == "row":
            continue
        panel_count += 1
        if not title:
            fail(where, "no title")
        if title in titles:
            fail(where, "another panel has this title: failures could not say which")
        titles.add(title)
        if (p.get("datasource") or {}).get("uid") != prom_uid:
            fail(where, f"data source is not the provisioned uid {prom_uid}")
        if not p.get("fieldConfig", {}).get("defaults", {}).get("unit"):
            fail(where, "no unit (fieldConfig.defaults.unit)")
        targets = p.get("targets") or []
        if not targets:
            fail(where, "no query")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs):
            fail(where, f"refIds {refs} are not unique")
        for t in targets:
            w = f"{where} / {t.get('refId')}"
            expr = t.get("expr", "")
            if not expr.strip():
                fail(w, "empty expression")
                continue
            if (t.get("datasource") or {}).get("uid") != prom_uid:
                fail(w, f"data source is not the provisioned uid {prom_uid}")
            if re.search(r"\bvector\s*\(", expr):
                fail(w, "vector(): a panel that shows a constant when its metric is missing")
            for fn, window in re.findall(r"\b(rate|irate|increase|delta|idelta|deriv)\s*\([^\[]*\[([^\]]*)\]", expr):
                if window != "$__rate_interval":
                    fail(w, f"{fn}() over [{window}]: use [$__rate_interval]")
            for ref in re.findall(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", expr):
                if (ref[0] or ref[1]) not in known:
                    fail(w, f"unknown variable ${ref[0] or ref[1]}")
            exprs.append((w, substitute(expr)))
            for metric in metric_names(expr):
                check_name(w, metric)

# --- every expression parses ---------------------------------------------------
# promtool parses rule expressions; one group per expression names the panel.
groups = [{"name": f"{where} #{i}", "rules": [{"record": "lint:expression", "expr": e}]}
          for i, (where, e) in enumerate(exprs)]
with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
    json.dump({"groups": groups}, f)
try:
    r = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
finally:
    os.unlink(f.name)
if r.returncode != 0:
    reported = False
    for line in (r.stdout + r.stderr).splitlines():
        m = re.search(r'group "(.*)", rule \d+, "lint:expression": (.*)', line)
        if m:
            fail(re.sub(r" #\d+$", "", m.group(1)), m.group(2))
            reported = True
    if not reported:
        fail("promtool check rules", (r.stdout + r.stderr).strip())

for line in failures:
    print(line)
print(f"{'FAILED' if failures else 'ok'}: {len(dashboards)} dashboards, {panel_count} panels, "
      f"{len(exprs)} expressions checked; {len(failures)} problems")
sys.exit(1 if failures else 0)
