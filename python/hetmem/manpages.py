"""Man pages of the hetmem command, written from its own argument parsers (argparse-manpage), so
that they never disagree with `hetmem COMMAND --help`: hetmem.1 and hetmem-COMMAND.1 for each
subcommand. `python -m hetmem.manpages DIRECTORY` (the build does it; `cmake --install` puts them
in PREFIX/share/man/man1)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from argparse_manpage.manpage import Manpage

from . import __version__
from .cli import build_parser

MANUAL = "hetmem manual"
SEE_ALSO = "The documentation in docs/ of the hetmem sources: README.md, docs/cli.md and a page per tool."


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line summary, parser) of each subcommand."""
    for action in parser._actions:  # argparse keeps its subparsers only here
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _page(parser: argparse.ArgumentParser, name: str, summary: str) -> str:
    page = Manpage(parser, _data={"project_name": "hetmem", "version": __version__, "manual_title": MANUAL})
    page.prog, page.description = name, summary
    page.add_section("see also", "=", SEE_ALSO)
    return str(page)


def write(directory: Path) -> list[Path]:
    """Writes hetmem.1 and one page per subcommand into `directory`; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    parser = build_parser()
    written = [directory / "hetmem.1"]
    written[0].write_text(_page(parser, "hetmem", "heterogeneous-memory placement for simulations"))
    for name, summary, sub in _subcommands(parser):
        path = directory / f"hetmem-{name}.1"
        path.write_text(_page(sub, f"hetmem-{name}", summary))
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m hetmem.manpages DIRECTORY", file=sys.stderr)
        return 2
    written = write(Path(argv[0]))
    print(f"hetmem: {len(written)} man pages in {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
