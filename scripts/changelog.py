#!/usr/bin/env python3
"""Reads CHANGELOG.md (Keep a Changelog format) for releases.

    scripts/changelog.py newest            the newest released version (0.2.0)
    scripts/changelog.py notes [VERSION]   that release's notes, Markdown (the
                                           GitHub release's body)
    scripts/changelog.py debian MAINTAINER [REVISION]
                                           a Debian changelog, one entry per
                                           release (what the .deb ships as
                                           changelog.Debian.gz)

A released entry's heading is `## [X.Y.Z] - YYYY-MM-DD`; `## [Unreleased]` is
skipped. Exits 1 with one line on stderr when the file has no such entry or
VERSION is not in it. Standard library only (the release machine needs
nothing else).
"""

import datetime
import email.utils
import re
import sys
import textwrap
from pathlib import Path

CHANGELOG = Path(__file__).resolve().parents[1] / "CHANGELOG.md"
HEADING = re.compile(r"^## \[(?P<version>\d+\.\d+\.\d+[^\]]*)\] - (?P<date>\d{4}-\d{2}-\d{2})\s*$")


class Release:
    """One released entry: its version, its date and its body's lines."""

    def __init__(self, version, date):
        self.version = version
        self.date = datetime.date.fromisoformat(date)
        self.lines = []

    def body(self):
        """The entry's Markdown without its heading, link references dropped."""
        lines = [line for line in self.lines if not re.match(r"^\[[^\]]+\]: ", line)]
        return "\n".join(lines).strip() + "\n"

    def top_bullets(self):
        """Each top-level bullet as one line of plain text (its sub-bullets
        left out, Markdown emphasis and code marks removed)."""
        bullets, current = [], None
        for line in self.lines:
            if line.startswith("- "):
                current = [line[2:].strip()]
                bullets.append(current)
            elif current is not None and line.startswith("  ") and not line.lstrip().startswith("- "):
                current.append(line.strip())
            else:
                current = None
        # A bullet that introduces sub-bullets ends in ":"; alone it ends the sentence.
        return [re.sub(r":$", ".", re.sub(r"\*\*|`", "", " ".join(b))) for b in bullets]


def releases(text):
    """The released entries, newest first (the file's order)."""
    found, current = [], None
    for line in text.splitlines():
        if line.startswith("## "):
            m = HEADING.match(line)
            current = Release(m["version"], m["date"]) if m else None
            if current:
                found.append(current)
        elif current is not None:
            current.lines.append(line)
    return found


def debian(entries, maintainer, revision):
    """A Debian changelog (deb-changelog(5)) of every release."""
    out = []
    for r in entries:
        out.append(f"slowpath ({r.version}-{revision}) unstable; urgency=medium\n")
        for bullet in r.top_bullets() or [f"Release {r.version}."]:
            out += textwrap.wrap(bullet, 78, initial_indent="  * ", subsequent_indent="    ")
        when = datetime.datetime.combine(r.date, datetime.time(12, 0), datetime.timezone.utc)
        out.append(f"\n -- {maintainer}  {email.utils.format_datetime(when)}\n")
    return "\n".join(out)


def main(argv):
    entries = releases(CHANGELOG.read_text())
    if not entries:
        sys.exit(f"changelog.py: {CHANGELOG.name} has no released entry (## [X.Y.Z] - YYYY-MM-DD)")
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "newest" and len(argv) == 2:
        print(entries[0].version)
    elif cmd == "notes" and len(argv) <= 3:
        version = argv[2] if len(argv) == 3 else entries[0].version
        match = [r for r in entries if r.version == version]
        if not match:
            sys.exit(f"changelog.py: {CHANGELOG.name} has no entry for {version}: add `## [{version}] - DATE`")
        print(match[0].body(), end="")
    elif cmd == "debian" and len(argv) in (3, 4):
        print(debian(entries, argv[2], argv[3] if len(argv) == 4 else "1"), end="")
    else:
        sys.exit(__doc__.strip().split("\n\n")[1])


if __name__ == "__main__":
    main(sys.argv)
