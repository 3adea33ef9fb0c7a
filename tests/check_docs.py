#!/usr/bin/env python3
"""check_docs.py -- the docs match the tree.

The API docs match include/rlock.h (as curl's test1139 does for its options):
- Every function declared in rlock.h has a section in docs/api/: a "## " heading
  naming it in backquotes.
- Every name in those headings exists in rlock.h (a function, type or macro; an
  error code through RLOCK_ERRNO_MAP), and every error code has its heading.

The docs (README.md, docs/**/*.md) name only what exists:
- every relative link leads to a file, and its #anchor to a heading there;
- every file name in backquotes (`lib/conn.c`, `conn.c`, `reentrant_acquire.lua`)
  is a file of the tree (a bare name: some file of that name);
- every test named in backquotes (`test_seams`, `test_kinds.c`) has its source.

usage: check_docs.py SOURCE_DIR
"""
import glob
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
fail = []

header = open(os.path.join(src, "include", "rlock.h")).read()
code = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
functions = set(re.findall(r"\b(rlock_[a-z0-9_]+)\s*\(", code))
names = set(re.findall(r"\b(rlock_[a-z0-9_]+|RLOCK_[A-Z0-9_]+)\b", code))
errmap = re.search(r"#define RLOCK_ERRNO_MAP\(X\)(.*?)\n\n", code, re.S).group(1)
codes = {"RLOCK_" + n for n in re.findall(r"X\(([A-Z0-9_]+),", errmap)}
names |= codes

headed = {}  # name -> page
for page in sorted(glob.glob(os.path.join(src, "docs", "api", "*.md"))):
    rel = os.path.relpath(page, src)
    for line in open(page):
        if line.startswith("## "):
            for n in re.findall(r"`((?:rlock|RLOCK)_[A-Za-z0-9_]+)`", line):
                headed.setdefault(n, rel)

for f in sorted(functions - set(headed)):
    fail.append(f"{f} is declared in rlock.h but has no section in docs/api/")
for n in sorted(set(headed) - names):
    fail.append(f"{headed[n]} has a section for {n}, which rlock.h does not declare")
for c in sorted(codes - set(headed)):
    fail.append(f"error code {c} has no section in docs/api/errors.md")

# ---------------------------------------------------------------- the docs' names
def slug(title):
    t = title.strip().lower()
    t = re.sub(r"[^\w\- ]", "", t)
    return t.replace(" ", "-")

skip_dirs = {".git", "node_modules"}
tree = []
for dirpath, dirnames, filenames in os.walk(src):
    dirnames[:] = [d for d in dirnames if d not in skip_dirs and not d.startswith("build")]
    for f in filenames:
        tree.append(os.path.relpath(os.path.join(dirpath, f), src))
basenames = {os.path.basename(f) for f in tree}
tests = {os.path.basename(f)[:-2] for f in tree if f.startswith("tests/") and f.endswith(".c")}

docs = ["README.md"] + sorted(f for f in tree if f.startswith("docs/") and f.endswith(".md"))
anchors = {}
def anchors_of(rel):
    if rel not in anchors:
        seen = set()
        text = re.sub(r"```.*?```", "", open(os.path.join(src, rel)).read(), flags=re.S)
        for h in re.findall(r"(?m)^#+ (.*)$", text):
            seen.add(slug(h))
        anchors[rel] = seen
    return anchors[rel]

FILE = re.compile(r"^(?:[\w.+-]+/)*[\w+-]+\.(?:c|h|lua|sh|py|md|cmake)$")
for rel in docs:
    text = open(os.path.join(src, rel)).read()
    here = os.path.dirname(rel)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(here, path)) if path else rel
        if not os.path.exists(os.path.join(src, dest)):
            fail.append(f"{rel}: link to {target}: no file {dest}")
        elif anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
            fail.append(f"{rel}: link to {target}: no heading #{anchor} in {dest}")
    for name in set(re.findall(r"`([^`\s]+)`", text)):
        if FILE.match(name) and not re.search(r"(^|[/_-])[A-Z]{2,}[._-]", name.replace("README", "")):
            if "/" in name:
                ok = any(f == name or f.endswith("/" + name) for f in tree)
            else:
                ok = name in basenames
            if not ok:
                fail.append(f"{rel}: names `{name}`, which is not a file of the tree")
        elif re.match(r"^test_[a-z0-9_]+$", name) and name not in tests:
            fail.append(f"{rel}: names test `{name}`, which has no tests/**/{name}.c")

for msg in fail:
    print("FAIL: " + msg)
if not fail:
    print(f"ok: {len(functions)} functions and {len(codes)} error codes each have a section in docs/api/;"
          f" {len(docs)} docs name only files and tests that exist")
sys.exit(1 if fail else 0)
