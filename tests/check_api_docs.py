#!/usr/bin/env python3
"""check_api_docs.py -- the API docs match include/rlock.h (as curl's test1139
does for its options).

- Every function declared in rlock.h has a section in docs/api/: a "## " heading
  naming it in backquotes.
- Every name in those headings exists in rlock.h (a function, type or macro; an
  error code through RLOCK_ERRNO_MAP), and every error code has its heading.

usage: check_api_docs.py SOURCE_DIR
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

for msg in fail:
    print("FAIL: " + msg)
if not fail:
    print(f"ok: {len(functions)} functions and {len(codes)} error codes each have a section in docs/api/")
sys.exit(1 if fail else 0)
