"""The documentation's commands run as written, so the docs cannot rot.

Every fenced block of README.md and docs/*.md in Python or shell must say
whether it runs: ```python runnable / ```sh runnable (this test runs it and
it must exit 0; Python blocks carry their own asserts), or
```python no-run / ```sh no-run (the text says why: a command that runs
for many minutes, the test command itself, a sketch with names of the
reader's). Shell blocks run with bash -e -o pipefail from the repository root, with the
test's Python first on PATH (the README's `.venv`); Python blocks run in a
fresh interpreter in a temporary directory.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(\S*)(.*)$")
LANGS = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh", "console": "sh"}
MARKS = ("runnable", "no-run")


def blocks(path):
    """(line, language, marks, code) of each fenced block in a Markdown file."""
    out, cur = [], None
    for n, line in enumerate(path.read_text().split("\n"), 1):
        m = FENCE.match(line.strip()) if line.lstrip().startswith("```") else None
        if cur is None and m:
            cur = (n, m.group(1), m.group(2).split(), [])
        elif cur is not None and line.strip() == "```":
            out.append((cur[0], cur[1], cur[2], "\n".join(cur[3]) + "\n"))
            cur = None
        elif cur is not None:
            cur[3].append(line)
    assert cur is None, f"{path.name}: block at line {cur[0]} is not closed"
    return out


def code_blocks():
    for path in DOCS:
        for line, lang, marks, code in blocks(path):
            if lang in LANGS:
                yield path, line, LANGS[lang], marks, code


RUNNABLE = [pytest.param(p, n, lang, code, id=f"{p.relative_to(ROOT)}:{n}")
            for p, n, lang, marks, code in code_blocks() if "runnable" in marks]


def test_every_code_block_says_whether_it_runs():
    unmarked = [f"{p.relative_to(ROOT)}:{n}" for p, n, _, marks, _ in code_blocks()
                if not any(m in marks for m in MARKS)]
    assert not unmarked, "blocks marked neither runnable nor no-run: " + ", ".join(unmarked)


def test_the_docs_have_runnable_blocks():
    # the README's example and each troubleshooting case at least
    assert len(RUNNABLE) >= 10, len(RUNNABLE)
    print(f"{len(RUNNABLE)} runnable blocks in {len(DOCS)} files")


def _anchors(path):
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for line in path.read_text().split("\n"):
        m = re.match(r"#+ (.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def test_docs_links_resolve():
    """Relative links between the docs name files that exist, and headings
    that exist in them."""
    missing = []
    for path in DOCS:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", path.read_text()):
            if "://" in target:
                continue
            dest = path.parent / target if target else path
            if not dest.exists():
                missing.append(f"{path.relative_to(ROOT)} -> {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                missing.append(f"{path.relative_to(ROOT)} -> {target}#{anchor}")
    assert not missing, missing


@pytest.mark.parametrize("path,line,lang,code", RUNNABLE)
def test_block_runs(path, line, lang, code, tmp_path):
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.pop("OPENMTIA_DRIVER", None)  # as a reader runs them: the default driver
    if lang == "python":
        cmd, cwd = [sys.executable, "-c", code], tmp_path
    else:
        cmd, cwd = ["bash", "-e", "-o", "pipefail", "-c", code], ROOT
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=540)
    assert r.returncode == 0, (f"{path.relative_to(ROOT)}:{line} exited {r.returncode}\n"
                               f"--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}")
    if lang == "sh":
        assert r.stdout.strip(), f"{path.relative_to(ROOT)}:{line} printed nothing"
