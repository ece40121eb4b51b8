"""Where a CIF loop's values go wrong, for gemmi's "Wrong number of values in loop".

gemmi names the line of the loop's ``loop_`` header, not the row that broke it: in an
``_atom_site`` loop of 100,000 rows the user is left to find the bad one. This module reads the
loop's values again, line by line (CIF's value tokens: bare words, quoted strings, ``;`` text
fields; ``#`` comments), only to say where they go wrong: gemmi has already refused the file.

In a loop written one row per line (mmCIF writers do so for ``_atom_site`` and most loops) that is
the first line whose count of values is not the number of columns; a ``;`` text field there
(a ``;`` at the start of a line opens a multi-line value that runs to the next line starting with
``;``) is named with the line it runs to. In a loop whose rows span several lines, the hint says
how many values are left over after the last whole row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: gemmi's message: "string:LINE:COL(OFFSET): Wrong number of values in loop _cat.*"
_WRONG_COUNT = re.compile(r"^string:(\d+)(?::\d+)?(?:\(\d+\))?:\s*Wrong number of values in loop")
#: one CIF value token: a quoted string closes at a quote followed by whitespace (CIF 1.1)
_TOKEN = re.compile(r"""'(?:[^'\n]|'(?=\S))*'(?=\s|$)|"(?:[^"\n]|"(?=\S))*"(?=\s|$)|\S+""")
#: reserved words that end a loop's values (with any tag, ``_…``)
_ENDS = ("loop_", "data_", "save_", "global_", "stop_")


@dataclass(frozen=True)
class _Line:
    """Values of the loop that begin on ``first`` (a ``;`` text field runs to ``last``)."""

    first: int
    values: int
    last: int
    text_field: bool = False
    closed: bool = True


def _tokens(line: str) -> list[str]:
    out = []
    for m in _TOKEN.finditer(line):
        token = m.group()
        if token.startswith("#"):
            break
        out.append(token)
    return out


def _loop(lines: list[str], header: int) -> tuple[int, list[_Line]] | None:
    """The number of columns of the loop whose ``loop_`` is on line ``header`` (1-based), and its
    values line by line. None: no ``loop_`` there."""
    i = header - 1
    first = _tokens(lines[i]) if 0 <= i < len(lines) else []
    if not first or first[0].lower() != "loop_":
        return None
    tags = len(first) - 1
    rows: list[_Line] = []
    i += 1
    while i < len(lines):
        line = lines[i]
        if line.startswith(";"):
            start = i
            i += 1
            while i < len(lines) and not lines[i].startswith(";"):
                i += 1
            if i >= len(lines):
                rows.append(_Line(start + 1, 1, len(lines), text_field=True, closed=False))
                break
            rows.append(_Line(start + 1, 1 + len(_tokens(lines[i][1:])), i + 1, text_field=True))
            i += 1
            continue
        tokens = _tokens(line)
        if tokens and tokens[0].startswith("_") and not rows:
            tags += len(tokens)
        elif tokens and (tokens[0].startswith("_") or tokens[0].lower().startswith(_ENDS)):
            break
        elif tokens:
            rows.append(_Line(i + 1, len(tokens), i + 1))
        i += 1
    return tags, rows


def loop_error_hint(text: str, reason: str) -> str | None:
    """Where the values of the loop gemmi's ``reason`` names go wrong in ``text`` (the CIF it
    read), or None when ``reason`` is another error or nothing more can be said."""
    m = _WRONG_COUNT.match(reason)
    if m is None:
        return None
    header = int(m.group(1))
    found = _loop(text.splitlines(), header)
    if found is None:
        return None
    columns, rows = found
    if not columns or not rows:
        return None
    whole = sum(1 for r in rows if r.values == columns and not r.text_field)
    if whole * 2 >= len(rows):  # one row per line: the first line that is not a row
        for k, r in enumerate(rows):
            if r.values == columns and not r.text_field:
                continue
            before = f"each row before it has {columns}" if k else f"the loop has {columns} columns"
            if r.text_field and not r.closed:
                return (f"line {r.first} opens a ';' text field that no later line closes (a line starting "
                        f"with ';' opens a multi-line value; {before})")  # fmt: skip
            if r.text_field:
                return (f"line {r.first} opens a ';' text field that runs to line {r.last} (a line starting "
                        f"with ';' opens a multi-line value): {r.values} values on lines {r.first}-{r.last}, "
                        f"where {before}")  # fmt: skip
            why = "a value missing?" if r.values < columns else "a value with spaces not quoted?"
            return f"line {r.first} has {r.values} values where {before} ({why})"
        return None
    total = sum(r.values for r in rows)
    if total % columns == 0:
        return None
    return (f"its {total} values (lines {rows[0].first}-{rows[-1].last}) leave {total % columns} over after "
            f"the last whole row of {columns}")  # fmt: skip
