#!/usr/bin/env python3
"""The docs against the tree they describe: every relative link resolves
(the file, and the heading an anchor names), every config key written as
`scdino.KEY` is a key of the schema (docs/config.md's generated reference),
every `--flag` a program's name comes before is one of its --help's, every
default stated as "`KEY` (default VALUE" is the reference's, and every
metric name is one docs/metrics.md documents. Prints "FAIL: ..." per
finding; exits 1 on any.

Usage: docs_test.py SOURCE_DIR BUILD_DIR
"""
import glob
import os
import re
import subprocess
import sys

src, build = sys.argv[1], sys.argv[2]
failures = []
checked = {"links": 0, "keys": 0, "flags": 0}

docs = sorted(glob.glob(os.path.join(src, "docs", "*.md")) + [os.path.join(src, "README.md")] +
              glob.glob(os.path.join(src, "*", "README.md")))


def slug(heading):
    """GitHub's anchor of a Markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    out, fence = set(), False
    seen = {}
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        m = re.match(r"^#{1,6} +(.*?)\s*$", line)
        if m:
            a = slug(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.add(a if n == 0 else f"{a}-{n}")
    return out


def prose(path):
    """The file's lines outside code fences, with their numbers."""
    fence = False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            yield n, line


# 1. Relative links.
link = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
for doc in docs:
    rel = os.path.relpath(doc, src)
    for n, line in prose(doc):
        for target in link.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto
            checked["links"] += 1
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            if not os.path.exists(full):
                failures.append(f"{rel}:{n}: link to {target}: no {os.path.relpath(full, src)}")
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                failures.append(f"{rel}:{n}: link to {target}: {os.path.relpath(full, src)} has no heading #{anchor}")

# 2. Config keys: scdino.KEY against the schema's reference.
reference = subprocess.run([os.path.join(build, "services/tools/scdino-config"), "doc"], capture_output=True,
                           text=True, check=True).stdout
# Each key of the reference, and its default where the row's cells parse
# plainly (an empty one is derived).
keys, defaults, section = set(), {}, None
for line in reference.splitlines():
    m = re.match(r"^#+ +`?([A-Za-z_.]+)`?", line)
    if m:
        section = m.group(1)
    m = re.match(r"^\| `([A-Za-z_.]+)`", line)
    if m and section:
        keys.add(f"{section}.{m.group(1)}")
    m = re.match(r"^\| `([A-Za-z_.]+)` \| [^|]* \| `?(.*?)`? \| .* \|$", line)
    if m and section:
        defaults[f"{section}.{m.group(1)}"] = m.group(2)
scdino_keys = {k for k in keys if k.startswith("scdino.")}
prefixes = {".".join(k.split(".")[:i]) for k in scdino_keys for i in range(2, k.count(".") + 1)}
key_ref = re.compile(r"`(scdino\.[a-z_][a-z_0-9.]*[a-z_0-9])(?![\w.])")
for doc in docs:
    rel = os.path.relpath(doc, src)
    for n, line in prose(doc):
        for k in key_ref.findall(line):
            checked["keys"] += 1
            if k not in scdino_keys and k not in prefixes:
                failures.append(f"{rel}:{n}: `{k}` is no key of the schema (scdino-config doc)")

# 3. Flags: `PROGRAM ... --flag` against PROGRAM --help.
programs = {
    "scdino-trainer": "services/trainer/scdino-trainer", "scdino-features": "services/features/scdino-features",
    "scdino-eval": "services/eval/scdino-eval", "scdino-preflight": "services/preflight/scdino-preflight",
    "scdino-pack": "services/tools/scdino-pack", "scdino-stats": "services/tools/scdino-stats",
    "scdino-export": "services/tools/scdino-export", "scdino-config": "services/tools/scdino-config",
    "scdino-synth": "services/tools/scdino-synth", "scdinoctl": "services/ctl/scdinoctl",
}
helps = {}
for name, rel_bin in programs.items():
    binary = os.path.join(build, rel_bin)
    if not os.path.exists(binary):
        failures.append(f"no {binary} to read the flags of")
        continue
    text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    for sub in re.findall(r"^  ([a-z][a-z-]+)\s", text, re.M):  # subcommands
        text += subprocess.run([binary, sub, "--help"], capture_output=True, text=True).stdout
    helps[name] = set(re.findall(r"(--[a-z][a-z0-9-]*)", text))
# The login node's submit script, by its --help.
helps["submit.sh"] = set(re.findall(r"(--[a-z][a-z0-9-]*)", subprocess.run(
    ["bash", os.path.join(src, "deploy/slurm/submit.sh"), "--help"], capture_output=True, text=True).stdout))
# The login node's way into the image's scdinoctl: its own flags, then
# scdinoctl's.
helps["scdinoctl.sh"] = helps.get("scdinoctl", set()) | set(re.findall(r"(--[a-z][a-z0-9-]*)", subprocess.run(
    ["bash", os.path.join(src, "deploy/slurm/scdinoctl.sh"), "--help"], capture_output=True, text=True).stdout))
program = r"(scdino-[a-z]+|scdinoctl\.sh|scdinoctl|submit\.sh)"
call = re.compile(r"`[^`]*?\b" + program + r"\b([^`]*)`")
def commands(path):
    """(line number, program, the rest of its command) for each program named
    in a code span of the prose or on a line of a code block (fenced or
    indented)."""
    fence = False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if line.startswith("```"):
            fence = not fence
            continue
        if fence or line.startswith("    "):
            m = re.search(r"(?<![\w-])" + program + r"(.*)", line)
            if m:
                yield n, m.group(1), m.group(2)
        else:
            for name, rest in call.findall(line):
                yield n, name, rest


for doc in docs:
    rel = os.path.relpath(doc, src)
    for n, name, rest in commands(doc):
        if name not in helps:
            continue
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
            checked["flags"] += 1
            if flag not in helps[name]:
                failures.append(f"{rel}:{n}: `{name} ... {flag}`: {name} --help has no {flag}")

# 4. Defaults: "`KEY` (default VALUE" and its spellings, in a paragraph,
# against the reference's default column (an empty one is a derived
# default: not compared).
stated = re.compile(r"`((?:scdino|meta|train_scDINO|compute_cls_features)\.[A-Za-z_.]*[A-Za-z0-9_])`"
                    r"(?: \w+){0,2}\s*[(,]\s*default(?: is|:)?\s+(`[^`]*`|[^\s,;)]+)")


def paragraphs(path):
    """(first line number, the paragraph's prose lines joined)."""
    start, lines = None, []
    for n, line in prose(path):
        if line.strip():
            start = start or n
            lines.append(line.strip())
        elif lines:
            yield start, " ".join(lines)
            start, lines = None, []
    if lines:
        yield start, " ".join(lines)


checked["defaults"] = 0
for doc in docs:
    rel = os.path.relpath(doc, src)
    for n, text in paragraphs(doc):
        for k, value in stated.findall(text):
            if k not in defaults or defaults[k] in ("", '""'):
                continue
            checked["defaults"] += 1
            if value.strip("`") != defaults[k]:
                failures.append(f"{rel}:{n}: `{k}` is said to default to {value}; scdino-config doc says `{defaults[k]}`")

# 5. Metric names: a name in the docs that has a metric's ending (the last
# word of a name docs/metrics.md documents, after at least two words) is
# one docs/metrics.md documents (tests/monitoring/metric_docs.py; the live
# stack test holds that table to a live /metrics).
sys.path.insert(0, os.path.join(src, "tests", "monitoring"))
import metric_docs  # noqa: E402
metric_names, metric_histograms = metric_docs.documented(src)
endings = {n.rsplit("_", 1)[1] for n in metric_names}
checked["metrics"] = 0
for doc in docs:
    rel = os.path.relpath(doc, src)
    for n, line in enumerate(open(doc, encoding="utf-8"), 1):
        for name in re.findall(r"(?<![\w:$])scdino_[a-z0-9]+_[a-z0-9_]*[a-z0-9](?![\w(])", line):
            if name.rsplit("_", 1)[1] not in endings:
                continue
            checked["metrics"] += 1
            if metric_docs.base(name, metric_histograms) not in metric_names:
                failures.append(f"{rel}:{n}: metric {name} is not documented in docs/metrics.md")

for f in failures:
    print("FAIL: " + f)
if not failures:
    print(f"ok: {len(docs)} documents: {checked['links']} relative links, {checked['keys']} config keys, "
          f"{checked['flags']} flags, {checked['defaults']} stated defaults and {checked['metrics']} metric names, all there")
sys.exit(1 if failures else 0)
