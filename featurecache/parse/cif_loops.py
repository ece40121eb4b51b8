"""Where a CIF loop's values go wrong, for gemmi's "Wrong number of values in loop".

gemmi names the line of the loop's ``loop_`` header, not the row that broke it: in an
``_atom_site`` loop of 100,000 rows the user is left to find the bad one. This module reads the
loop's values again, line by line (CIF's value tokens: bare words, quoted strings, ``;`` text
fields; ``#`` comments), only to say where they go wrong: gemmi has already refused the file.
Lines are counted as gemmi counts them, at ``\\n`` only.

It says only what the counts prove. Reading the records (a line of values, or a ``;`` text field:
a ``;`` at the start of a line opens a multi-line value that runs to the next line starting with
``;``) with a running count of values modulo the columns, the suspect is the first record after
the last one that ended a whole row. When every record before it ended a whole row (rows of one
line), those rows are intact (a damaged one would not end a row) and the row the suspect begins
holds the damage (intact, it would end a row again): the hint names that row, or, when every
record after it is one whole row too (a loop of one row per line, ``_atom_site``), the line
itself with its count of values. When rows before the suspect span several lines, a later row may
end on a line by chance, so no line can be told: the hint gives the values left over. A text
field that nothing closes is named when the values were in step before it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

#: gemmi's message: "string:LINE:COL(OFFSET): Wrong number of values in loop _cat.*"
_WRONG_COUNT = re.compile(r"^string:(\d+)(?::\d+)?(?:\(\d+\))?:\s*Wrong number of values in loop")
#: one CIF value token: a quoted string closes at a quote followed by whitespace (CIF 1.1)
_TOKEN = re.compile(r"""'(?:[^'\n]|'(?=\S))*'(?=\s|$)|"(?:[^"\n]|"(?=\S))*"(?=\s|$)|\S+""")
#: a line that needs the tokenizer: a quote or a comment at the start of a token
_SPECIAL = re.compile(r"""(?:^|\s)['"#]""")
#: reserved words that end a loop's values (with any tag, ``_…``)
_ENDS = ("loop_", "data_", "save_", "global_", "stop_")


@dataclass(frozen=True)
class _Values:
    """Values of the loop that begin on line ``first``; a ``;`` text field runs to ``last``."""

    first: int
    count: int
    last: int
    text_field: bool = False
    closed: bool = True


def _tokens(line: str) -> list[str]:
    if not _SPECIAL.search(line):
        return line.split()
    if "#" not in line:  # quoted values, no comment
        return _TOKEN.findall(line)
    out = []
    for m in _TOKEN.finditer(line):
        token = m.group()
        if token.startswith("#"):
            break
        out.append(token)
    return out


def _offset(text: str, number: int) -> int:
    """Where line ``number`` (1-based, lines split at ``\n`` as gemmi counts) begins (-1: none)."""
    pos = 0
    for _ in range(number - 1):
        pos = text.find("\n", pos)
        if pos < 0:
            return -1
        pos += 1
    return pos


def _lines(text: str, pos: int, number: int) -> Iterator[tuple[int, int, str]]:
    """``(line number, offset, line)`` of the lines from offset ``pos`` (line ``number``) on."""
    while 0 <= pos <= len(text):
        end = text.find("\n", pos)
        line = text[pos:] if end < 0 else text[pos:end]
        yield number, pos, line.removesuffix("\r")
        if end < 0:
            return
        pos, number = end + 1, number + 1


def _loop(text: str, header: int) -> tuple[int, Iterator[_Values]] | None:
    """The number of columns of the loop whose ``loop_`` is on line ``header``, and its values by
    line (or text field). None: no ``loop_`` there."""
    columns = 0
    for number, pos, line in _lines(text, _offset(text, header), header):
        tokens = ["?"] if line.startswith(";") else _tokens(line)  # a text field: a value
        if number == header:
            if not tokens or tokens[0].lower() != "loop_":
                return None
            tokens = tokens[1:]
        tags = next((i for i, t in enumerate(tokens) if not t.startswith("_")), len(tokens))
        columns += tags
        if tags < len(tokens):  # values begin on this line, after its tags (and ``loop_``)
            return columns, _records(text, pos, number, tags + (number == header))
    return columns, iter(())


def _records(text: str, pos: int, number: int, skip: int) -> Iterator[_Values]:
    """The loop's values by record from offset ``pos`` (line ``number``), the first ``skip`` tokens
    of that line being its tags."""
    lines = _lines(text, pos, number)
    for k, _pos, line in lines:
        if line.startswith(";"):
            for end, _end_pos, closing in lines:
                if closing.startswith(";"):
                    yield _Values(k, 1 + len(_tokens(closing[1:])), end, text_field=True)
                    break
            else:
                yield _Values(k, 1, k, text_field=True, closed=False)
                return
            continue
        tokens = _tokens(line)[skip:]
        skip = 0
        if tokens:
            head = tokens[0]
            if head[0] == "_" or head.lower().startswith(_ENDS):
                return
            yield _Values(k, len(tokens), k)


def loop_error_hint(text: str, reason: str, first_line: int = 1) -> str | None:
    """Where the values of the loop gemmi's ``reason`` names go wrong in ``text`` (the CIF it
    read, starting on its file's line ``first_line``: the lines named are the file's), or None when
    ``reason`` is another error or nothing can be said for sure."""
    hint = _loop_error_hint(text, reason)
    if hint is None or first_line == 1:
        return hint
    return re.sub(r"\bline (\d+)", lambda m: f"line {int(m.group(1)) + first_line - 1}", hint)


def _loop_error_hint(text: str, reason: str) -> str | None:
    m = _WRONG_COUNT.match(reason)
    if m is None:
        return None
    found = _loop(text, int(m.group(1)))
    if found is None:
        return None
    columns, values = found
    if not columns:
        return None
    acc = 0  # values mod columns at the end of the records so far
    first = 0  # the loop's first line of values
    suspect: _Values | None = None  # the first record after that line
    wrapped = False  # a row before it spanned several lines
    whole_after = True  # every record after it is one whole row (columns values on one line)
    for v in values:
        first = first or v.first
        # an unclosed text field is the cause, unless the values were out of step before it (then it
        # pairs ';' lines wrongly)
        if not v.closed:
            if suspect is None:
                return (f"line {v.first} opens a ';' text field that no later line closes (a line starting "
                        f"with ';' opens a multi-line value)")  # fmt: skip
            break
        acc = (acc + v.count) % columns
        if acc == 0:
            wrapped = wrapped or suspect is not None
            suspect = None
        elif suspect is None:
            suspect, whole_after = v, True
        elif v.text_field or v.count != columns:
            whole_after = False
    if acc == 0 or suspect is None:
        return None
    before = (
        f"each row before it has {columns}" if suspect.first > first else f"the loop has {columns} columns"
    )
    if not wrapped and whole_after and not suspect.text_field:  # one row per line before and after it
        why = "a value missing?" if suspect.count < columns else "a value with spaces not quoted?"
        return f"line {suspect.first} has {_values(suspect.count)} where {before} ({why})"
    if not wrapped:
        # every record before it ended a whole row, so the rows before it are intact (a damaged line
        # of them would not), and the row it begins is not (intact, it would end a row again)
        field = (f", which opens a ';' text field that runs to line {suspect.last} (a line starting with ';' "
                 f"opens a multi-line value)" if suspect.text_field else "")  # fmt: skip
        return (f"the values go out of step in the row that begins at line {suspect.first}{field}: the rows "
                f"before it are whole ({before}), and no line from there on ends a row")  # fmt: skip
    return (f"its values leave {acc} over after the last whole row of {columns} (rows span several lines, so "
            f"counting cannot tell which line breaks it)")  # fmt: skip


def _values(n: int) -> str:
    return f"{n} value" if n == 1 else f"{n} values"
