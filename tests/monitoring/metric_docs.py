#!/usr/bin/env python3
"""The metric names docs/metrics.md documents, for the tests that hold code,
dashboards, docs and a live /metrics to them.

As a module: documented(SOURCE_DIR) -> (names, histogram names), with the
table's `<service>` and `<unit>` placeholders expanded; base(NAME, histograms)
-> the family a sample's name belongs to (a histogram's _bucket, _sum and
_count are its own).

As a program, against a live Prometheus that scraped the services and
node_exporter's textfiles (tests/monitoring/live_test.sh):

    metric_docs.py --prometheus URL SOURCE_DIR

fails (prints FAIL: ..., exits 1) for every scdino_* family Prometheus holds
that docs/metrics.md does not document, and lists the documented ones it
does not hold (families a run exports only in some states).
"""
import os
import re
import sys

SERVICES = ("trainer", "features", "eval")
UNITS = ("images", "queries")


def rows(src):
    """docs/metrics.md's table rows: (name as written, kind, every expansion)."""
    with open(os.path.join(src, "docs", "metrics.md"), encoding="utf-8") as f:
        text = f.read()
    for row in re.finditer(r"^\|\s*`(scdino_[^`]+)`\s*\|\s*(\w*)\s*\|", text, re.M):
        name, kind = row.groups()
        yield name, kind, {name.replace("<service>", s).replace("<unit>", u) for s in SERVICES for u in UNITS}


def documented(src):
    names, histograms = set(), set()
    for _, kind, expanded in rows(src):
        names |= expanded
        if kind == "histogram":
            histograms |= expanded
    return names, histograms


def literals(src):
    """The string literals of services/ where metrics are registered
    (prometheus-cpp) or written as text exposition (a node_exporter
    textfile, common/prom_text.h): a word like "epochs" is in many files."""
    out = set()
    for root, _, files in os.walk(os.path.join(src, "services")):
        for f in files:
            if not f.endswith((".cc", ".h")):
                continue
            with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            if "prometheus::" in text or "# TYPE " in text or "PromText" in text:
                out.update(re.findall(r'"((?:[^"\\\n]|\\.)*)"', text))
    return out


def exported(name, lits):
    """A literal names it, or literals put it together (prefix + "iterations_total")."""
    if name in lits:
        return True
    m = re.match(r"scdino_(trainer|features|eval)_(.+)$", name)
    if not m:
        return False
    rest = m.group(2)
    if rest in lits or "_" + rest in lits:
        return True
    parts = rest.split("_")
    return any("_".join(parts[:i]) in lits and ("_" + "_".join(parts[i:]) in lits or "_".join(parts[i:]) in lits)
               for i in range(1, len(parts)))


def base(name, histograms):
    stripped = re.sub(r"_(bucket|sum|count)$", "", name)
    return stripped if stripped in histograms else name


def main(argv):
    import json
    import urllib.request
    url, src = argv[argv.index("--prometheus") + 1], argv[-1]
    names, histograms = documented(src)
    live = json.load(urllib.request.urlopen(url + "/api/v1/label/__name__/values", timeout=10))["data"]
    families = {base(n, histograms) for n in live if n.startswith("scdino_")}
    missing = sorted(families - names)
    for n in missing:
        print(f"FAIL: {n} is on a live /metrics but not documented in docs/metrics.md")
    # A row of the table is seen when one of its expansions is live.
    unseen = [name for name, _, expanded in rows(src) if not expanded & families]
    print(f"ok: {len(families)} scdino_* families live, each documented in docs/metrics.md"
          if not missing else f"{len(missing)} live families undocumented")
    print(f"documented, not live in this test ({len(unseen)}): {' '.join(unseen)}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
