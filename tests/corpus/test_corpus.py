"""Replays tests/corpus/files through `embedrt inspect` and `embedrt convert`: each file must be
refused with exit code 3 (bad input) and the exact message listed in expected.tsv, never a crash, and
convert must leave no output behind.

usage: python3 test_corpus.py EMBEDRT_CLI
"""
import os
import subprocess
import sys
import tempfile

cli = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
passed = failed = 0
with open(os.path.join(here, "expected.tsv")) as f:
    cases = [line.rstrip("\n").split("\t", 1) for line in f if not line.startswith("#")]
with tempfile.TemporaryDirectory() as work:
    for name, refusal in cases:
        path = os.path.join(here, "files", name)
        inspect = subprocess.run([cli, "inspect", path], capture_output=True, text=True, errors="replace", timeout=60)
        out = os.path.join(work, "out.embt")
        convert = subprocess.run([cli, "convert", path, "-o", out, "--token", "weight"], capture_output=True,
                                 text=True, errors="replace", timeout=60)
        problems = []
        if inspect.returncode != 3:
            problems.append(f"inspect exit {inspect.returncode}")
        if refusal not in inspect.stderr:
            problems.append(f"inspect said {inspect.stderr.strip()!r}")
        if convert.returncode != 3 or refusal not in convert.stderr:
            problems.append(f"convert exit {convert.returncode}: {convert.stderr.strip()!r}")
        if os.listdir(work):
            problems.append(f"convert left {os.listdir(work)}")
        if problems:
            failed += 1
            print(f"FAIL {name}: expected {refusal!r}; " + "; ".join(problems))
        else:
            passed += 1
if os.path.exists("/tmp/pwned"):
    failed += 1
    print("FAIL a corpus file executed code (/tmp/pwned exists)")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed or passed < 30 else 0)
