"""The one way a generator writes into a hand-written file: a block is the
lines between a line holding `generated:NAME begin` and one holding
`generated:NAME end`, each in the file's own comment form (`<!-- ... -->` in
Markdown, `# ...` in YAML and shell files, indented as the lines around
them). The begin line may say more after `begin` (who writes the block);
both lines stay as they are, and only the lines between are replaced.

docs/generate.py (the docs' blocks) and deploy/signals.py (the chart's
values and the systemd defaults) both write through `replace`.
"""

import re


def replace(text, name, body, where="the file"):
    """`text` with the lines between its generated:`name` begin and end lines
    replaced by `body` (whole lines, each ending in a newline). Raises
    SystemExit naming `where` unless each marker is there exactly once,
    begin before end."""
    begin = list(re.finditer(rf"^.*\bgenerated:{re.escape(name)} begin\b.*\n", text, re.M))
    end = list(re.finditer(rf"^.*\bgenerated:{re.escape(name)} end\b", text, re.M))
    if len(begin) != 1 or len(end) != 1 or end[0].start() < begin[0].end():
        raise SystemExit(f"{where}: no generated:{name} begin and end lines (or more than one pair)")
    if body and not body.endswith("\n"):
        raise SystemExit(f"{where}: generated:{name}: the block's text must end in a newline")
    return text[:begin[0].end()] + body + text[end[0].start():]
