#!/usr/bin/env python3
"""docs.references: what the docs, the README and the scripts point at exists.

A probe found docs/design.md citing tests that do not exist (apps.Resume*, dds.*) and
scripts/install-deps.sh pointing at a docs/build.md that was never written. This checks, over
README.md, docs/*.md, perf/**/*.md and every script and CMake file:
  - each `docs/NAME.md` (or `perf/.../NAME.md`, `scripts/...`) path named exists;
  - in docs/design.md and docs/testing.md, each backticked test name or pattern (apps.X,
    slurm.*, test_dds_*, ...) matches at least one test that ctest lists.
Usage: check_references.py SOURCE_DIR BUILD_DIR
"""
import fnmatch
import glob
import os
import re
import subprocess
import sys

src, build = sys.argv[1], sys.argv[2]
problems = []

texts = []
for pattern in ("README.md", "docs/*.md", "perf/**/*.md", "scripts/**/*.sh", "scripts/**/*.sbatch",
                "scripts/**/*.py", "**/CMakeLists.txt", "include/**/*.hpp", "src/**/*.hpp", "src/**/*.cpp",
                "apps/*.cpp", "adapters/**/*.py"):
    for path in glob.glob(os.path.join(src, pattern), recursive=True):
        if "/build" in os.path.relpath(path, src).split(os.sep)[0]:
            continue
        texts.append((os.path.relpath(path, src), open(path, errors="replace").read()))

# 1. Paths into the project's own docs, perf and scripts.
path_re = re.compile(r"(?<![\w/.-])((?:docs|perf|scripts)/[\w./-]*\w\.(?:md|sh|py|sbatch))")
for name, text in texts:
    for ref in sorted(set(path_re.findall(text))):
        if not os.path.exists(os.path.join(src, ref)):
            problems.append(f"{name} names {ref}, which does not exist")

# 2. Test names cited where the docs say which tests hold an invariant.
listing = subprocess.run(["ctest", "-N"], cwd=build, capture_output=True, text=True, check=True).stdout
tests = re.findall(r"Test\s+#\d+: (\S+)", listing)
assert len(tests) > 50, f"ctest listed only {len(tests)} tests in {build}"
# A test name is a dotted word (`apps.faults.*`, `dds.*`) or a test_ binary; file names are not.
cite_re = re.compile(r"`((?:[a-z_]+(?:\.[\w*]+)+)|(?:test_[\w*]+(?:\.[\w*]+)*))`")
files = re.compile(r"\.(md|sh|py|h5|json|csv|tsv|hpp|cpp|h|cu|sbatch|txt|toml|so|out|log|cfg|yaml|png|conf)$")
for doc in ("docs/design.md", "docs/testing.md"):
    text = open(os.path.join(src, doc)).read()
    for cite in sorted(set(cite_re.findall(text))):
        if files.search(cite) or cite.startswith(("antdt.", "torch.", "std.", "np.")):
            continue  # a file, or a Python or C++ name
        if not any(fnmatch.fnmatchcase(t, cite) or t.startswith(cite + ".") for t in tests):
            problems.append(f"{doc} cites the test `{cite}`, which no test matches")

for p in problems:
    print("FAIL:", p)
print(f"{len(texts)} files read, {len(tests)} tests listed: {len(problems)} broken references")
sys.exit(1 if problems else 0)
