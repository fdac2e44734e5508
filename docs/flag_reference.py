"""Writes docs/flags.md, the flag reference of every command, from the absl flag definitions.

    python docs/flag_reference.py          # regenerate docs/flags.md
    python docs/flag_reference.py --check  # exit status 1 if docs/flags.md is out of date

A command takes the flags its module defines plus those in its `COMMAND_FLAGS` (its settings class's fields and the
shared flags it names, `tf_transfer/core/flags.py`), with the default and help text they have there (`tf_transfer.core.cli.run` applies them before
parsing). All command modules are imported into this one process, as the tests do.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT = os.path.join(ROOT, "docs", "flags.md")

COMMANDS = ("glue", "stack", "multitask", "sentiment", "bench", "experiments", "sweep", "predict")
# bench takes the trainer's flags as its own: it imports tf_transfer.glue and runs with glue.COMMAND_FLAGS.
EXTENDS = {"bench": "glue"}


def _module(command: str):
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    return importlib.import_module(f"tf_transfer.{command}")


def command_flags(command: str) -> list:
    """`[(name, type, default, help)]` of every flag `command` takes, sorted by name."""
    from absl import flags

    FLAGS = flags.FLAGS
    module = _module(command)
    sources = [command] + ([EXTENDS[command]] if command in EXTENDS else [])
    rows = {}
    from tf_transfer.core.flags import HF_ALIASES

    for source in sources:
        _module(source)
        # Aliases come from the command's own HF_ALIASES below: whichever module defined an alias first (the import
        # order of this process) must not decide which commands list it.
        for flag in FLAGS.get_flags_for_module(f"tf_transfer.{source}"):
            if flag.name not in HF_ALIASES:
                rows.setdefault(flag.name, (_type(flag), flag.default, flag.help))
    common = getattr(module, "COMMAND_FLAGS", None)
    if common is None and command in EXTENDS:
        common = _module(EXTENDS[command]).COMMAND_FLAGS
    # The command's own default and help, not whatever the last `cli.run` in this process put on the shared flag.
    for name, (default, help_text) in (common or {}).items():
        rows[name] = (_type(FLAGS[name]), default, help_text)
    # An alias (Hugging Face's name) reads its flag's default as it is now, which another command run in this process
    # may have changed: it shows its flag's row instead.
    # A command's aliases (its `HF_ALIASES`) are listed whichever command's module defined them first.
    for alias in (alias for source in sources for alias in getattr(_module(source), "HF_ALIASES", {})):
        rows.setdefault(alias, (_type(FLAGS[alias]), FLAGS[alias].default, FLAGS[alias].help))
    for alias, name in HF_ALIASES.items():
        if alias in rows and name in rows:
            rows[alias] = (rows[alias][0], rows[name][1], rows[alias][2])
    return [(name, *rows[name]) for name in sorted(rows)]


def _type(flag) -> str:
    kind = flag.flag_type()
    return "list" if "list" in kind else kind


def _default(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (list, tuple)):
        if not value:
            return ""
        text = ",".join(str(v) for v in value)
    elif value == "":
        text = '""'
    else:
        text = str(value)
    return f"`{text}`"


def _cell(text: str) -> str:
    """One line of Markdown for a table cell: code spans kept, `|`, `*` and `<` escaped elsewhere."""
    parts = " ".join(str(text).split()).split("`")
    for i, part in enumerate(parts):
        if i % 2 == 0:  # outside a code span
            part = part.replace("\\", "\\\\").replace("*", "\\*").replace("<", "&lt;")
        parts[i] = part.replace("|", "\\|")
    return "`".join(parts)


def _usage(command: str, module) -> str:
    usage = getattr(module, "USAGE", None)
    usage = re.sub(r"^usage:\s*", "", usage) if usage else f"python -m tf_transfer.{command} [flags]"
    return f"`{usage}`"


def render() -> str:
    """The text of docs/flags.md."""
    lines = [
        "# Flags of every command",
        "",
        "Generated from the flag definitions by `python docs/flag_reference.py`; do not edit by hand (the tests fail",
        "when this file is out of date). Each command also takes absl's standard flags (`--flagfile`, `--helpfull`,",
        "`--verbosity`, ...); a flag given after `--flagfile` overrides the file. An empty default means none.",
        "",
        " · ".join(f"[{command}](#{command})" for command in COMMANDS),
    ]
    for command in COMMANDS:
        module = _module(command)
        summary = (module.__doc__ or "").strip().split("\n")[0]
        lines += ["", f"## {command}", "", f"{_usage(command, module)}: {_cell(summary)}"]
        if command in EXTENDS:
            lines += ["", f"It takes every flag of [{EXTENDS[command]}](#{EXTENDS[command]}) too (listed again below)."]
        lines += ["", "| flag | type | default | help |", "|---|---|---|---|"]
        for name, kind, default, help_text in command_flags(command):
            lines.append(f"| `--{name}` | {kind} | {_default(default)} | {_cell(help_text)} |")
    return "\n".join(lines) + "\n"


def is_current(path: str = None) -> bool:
    """Whether the file at `path` (default docs/flags.md) is what `render()` writes."""
    path = path or OUTPUT
    try:
        with open(path, encoding="utf-8") as f:
            return f.read() == render()
    except FileNotFoundError:
        return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit with status 1 if docs/flags.md is out of date")
    args = parser.parse_args(argv)
    if args.check:
        if is_current():
            print(f"{os.path.relpath(OUTPUT)} is up to date")
            return 0
        print(f"{os.path.relpath(OUTPUT)} is out of date: run python docs/flag_reference.py", file=sys.stderr)
        return 1
    with open(OUTPUT, "w", encoding="utf-8") as f:
        f.write(render())
    print(f"wrote {os.path.relpath(OUTPUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
