"""The documentation: docs/flags.md matches the flag definitions, every relative link and anchor in README.md,
BUILD.md, docs/*.md, benchmarks/README.md and benchmarks/LOG.md leads somewhere (external links are not fetched), and the modules, functions and files the
pages name in code spans exist."""

from __future__ import annotations

import importlib.util
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", "BUILD.md", "benchmarks/README.md", "benchmarks/LOG.md"] + sorted(os.path.join("docs", name) for name in os.listdir(os.path.join(REPO, "docs"))
                               if name.endswith(".md"))

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def load_flag_reference():
    spec = importlib.util.spec_from_file_location("flag_reference", os.path.join(REPO, "docs", "flag_reference.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prose_lines(text: str):
    """`(line number, line)` of the lines outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.split("\n"), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text lowercased, punctuation other than - and _ dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts as its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: str) -> set:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    seen, found = {}, set()
    for _, line in prose_lines(text):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: str):
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        text = f.read()
    for number, line in prose_lines(text):
        for target in LINK.findall(CODE_SPAN.sub("code", line)):
            yield number, target


def test_flag_reference_is_current():
    reference = load_flag_reference()
    with open(os.path.join(REPO, "docs", "flags.md"), encoding="utf-8") as f:
        written = f.read()
    assert written == reference.render(), "docs/flags.md is out of date: run python docs/flag_reference.py"


def test_flag_reference_check_sees_a_stale_file(tmp_path, monkeypatch):
    reference = load_flag_reference()
    stale = tmp_path / "flags.md"
    stale.write_text(reference.render().replace("| `--lr` |", "| `--learning_rate` |", 1))
    monkeypatch.setattr(reference, "OUTPUT", str(stale))
    assert reference.main(["--check"]) == 1
    assert reference.main([]) == 0 and reference.main(["--check"]) == 0


def test_flag_reference_lists_a_commands_own_default_for_a_shared_flag():
    text = load_flag_reference().render()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S))
    assert "| `--batch_size` | int | `1` |" in sections["glue"]
    assert "| `--batch_size` | int | `64` | Prediction batch size. |" in sections["predict"]
    assert "| `--steps` |" in sections["bench"] and "| `--cache_frozen` |" in sections["bench"]
    assert "| `--cache_frozen` |" not in sections["stack"]


@pytest.mark.parametrize("heading, expected", [
    ("Outputs: `summary.json`", "outputs-summaryjson"),
    ("Outputs (in `--output_dir`)", "outputs-in---output_dir"),
    ("Set up (Python 3.11, from the repository root)", "set-up-python-311-from-the-repository-root"),
    ("Exporting the model and scoring files: `tf_transfer.predict`",
     "exporting-the-model-and-scoring-files-tf_transferpredict"),
])
def test_slug_is_githubs(heading, expected):
    assert slug(heading) == expected


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_and_anchors_resolve(page):
    broken = []
    for number, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I):  # http:, https:, mailto: ...: not fetched
            continue
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        full = os.path.join(REPO, resolved)
        if not os.path.exists(full):
            broken.append(f"{page} (line {number}): {target}: no such file {resolved}")
            continue
        if anchor and resolved.endswith(".md") and anchor not in anchors(full):
            broken.append(f"{page} (line {number}): {target}: no heading with anchor #{anchor} in {resolved}")
    assert not broken, "\n".join(broken)


MODULE = re.compile(r"\btf_transfer(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
REPO_PATH = re.compile(r"(?<![\w./-])((?:tf_transfer|flags|experiments|benchmarks|reports)/[A-Za-z0-9_./{},<>*-]*)")


def resolves(dotted: str) -> bool:
    """`tf_transfer.a.b.name`: a module file or package of the longest prefix, defining the next name if any."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = os.path.join(REPO, *parts[:end])
        source = base + ".py" if os.path.isfile(base + ".py") else os.path.join(base, "__init__.py")
        if os.path.isfile(source):
            if end == len(parts):
                return True
            with open(source, encoding="utf-8") as f:
                text = f.read()
            name = re.escape(parts[end])
            # ... or exporting it lazily, as tf_transfer/__init__.py's `_PUBLIC` table does: `"name": "module"`.
            return bool(re.search(rf"^(?:def|class) {name}\b|^{name}\s*[:=]|^from \S+ import .*\b{name}\b|"
                                  rf'^\s+"{name}": "tf_transfer\.', text, flags=re.M))
    return False


@pytest.mark.parametrize("page", PAGES)
def test_named_modules_and_files_exist(page):
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        spans = [span for _, span in CODE_SPAN.findall(f.read())]
    missing = []
    for span in spans:
        missing += [m for m in MODULE.findall(span) if not resolves(m)]
        for path in REPO_PATH.findall(span):
            if re.search(r"[{}<>*]|_$", path):  # a pattern (k{1,2,3,4}, <head>, stack_*), not one file
                continue
            if not os.path.exists(os.path.join(REPO, path)):
                missing.append(path)
    assert not missing, f"{page} names what does not exist: {sorted(set(missing))}"



def test_no_file_carries_a_merge_conflicts_markers():
    """A merge resolved in one file and committed with another still conflicted left git's markers in
    benchmarks/LOG.md once; every text file of the project is read for them."""
    marker = re.compile(r"^(<{7} |={7}$|>{7} )", re.M)
    found = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("runs", "__pycache__")]
        for name in files:
            if name.endswith((".py", ".md", ".cfg", ".flags", ".sh", ".toml", ".txt", ".csv")):
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                    if marker.search(f.read()):
                        found.append(os.path.relpath(os.path.join(folder, name), REPO))
    assert not found
