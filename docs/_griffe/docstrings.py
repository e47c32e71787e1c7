"""A griffe extension that lets the API reference read fedsample's docstrings as they are written.

The docstrings are NumPy-style prose with three habits that Markdown would misread, so this
extension rewrites each docstring's text (not the source) before mkdocstrings parses it:

* doctests (``>>>`` lines and their output) become fenced ``pycon`` blocks; Markdown would read
  ``>>>`` as three nested quotes;
* Sphinx roles (``:class:`~fedsample.samplers.Sampler```, ``:func:`make_sampler```) become code
  that links to the object's API entry where the site documents it (an optional cross-reference:
  a name the site does not document stays plain code, never a broken link);
* prose or doctests written after a ``Parameters`` section move before it: the NumPy parser reads
  every later line as another parameter.

It also gives a lazy package whose ``__all__`` is computed (``sorted(_HOMES)`` in
``fedsample.engine``) the exports that Python sees, which static analysis cannot.

Loaded by mkdocs.yml (``plugins.mkdocstrings.handlers.python.options.extensions``).
"""

from __future__ import annotations

import html
import importlib
import re
from typing import Any

import griffe

SECTION_UNDERLINE = re.compile(r"^-{3,}\s*$")
# An item of a NumPy section: "name", "name:", "name : type", "*args", "a, b : int".
SECTION_ITEM = re.compile(r"^\*{0,2}\w+(\s*,\s*\*{0,2}\w+)*\s*(:.*)?$")
ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|attr|data|exc|obj|const):`(~?)([^`<>]+?)(?:\s*<([^`>]+)>)?`")


def _move_trailing_text(lines: list[str]) -> list[str]:
    """Move what follows the last NumPy section's items (prose, doctests) before the first section."""
    headers = [
        i
        for i in range(len(lines) - 1)
        if lines[i].strip() and not lines[i].startswith(" ") and SECTION_UNDERLINE.match(lines[i + 1])
    ]
    if not headers:
        return lines
    # The section ends at the first unindented line after a blank one that is not an item.
    for i in range(headers[-1] + 2, len(lines)):
        line = lines[i]
        if line and not line.startswith(" ") and not lines[i - 1].strip() and not SECTION_ITEM.match(line):
            trailing = lines[i:]
            body = lines[: headers[0]]
            while body and not body[-1].strip():
                body.pop()
            sections = lines[headers[0] : i]
            while sections and not sections[-1].strip():
                sections.pop()
            return [*body, "", *trailing, "", *sections]
    return lines


def _fence_doctests(lines: list[str]) -> list[str]:
    """Wrap each run of doctest lines (prompts, continuations, output up to a blank line) in a fence."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        stripped = lines[i].lstrip()
        if not stripped.startswith(">>>"):
            out.append(lines[i])
            i += 1
            continue
        indent = lines[i][: len(lines[i]) - len(stripped)]
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip():
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return out


def _role_to_reference(module: str, match: re.Match[str]) -> str:
    kind, tilde, text, target = match.groups()
    target = (target or text).strip().lstrip("~")
    title = text.strip().lstrip("~")
    if tilde or (kind == "meth" and "." in title):
        title = title.rsplit(".", 1)[-1]
    if kind in ("func", "meth"):
        title += "()"
    identifier = target if target.startswith("fedsample") else f"{module}.{target}"
    return f'<autoref identifier="{html.escape(identifier)}" optional><code>{html.escape(title)}</code></autoref>'


def rewrite(text: str, module: str) -> str:
    """The docstring ``text`` of an object of ``module``, rewritten for Markdown (see the module's docstring)."""
    lines = _fence_doctests(_move_trailing_text(text.splitlines()))
    fenced = False
    for n, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines[n] = ROLE.sub(lambda match: _role_to_reference(module, match), line)
    return "\n".join(lines)


class FedsampleDocstrings(griffe.Extension):
    """Rewrites every docstring of the loaded package once, after it is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._visit(pkg, set())

    def _visit(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        if obj.is_module and "__all__" in obj.members and not obj.exports:
            obj.exports = list(importlib.import_module(obj.path).__all__)
        if obj.docstring is not None:
            module = obj.path if obj.is_module else obj.module.path
            obj.docstring.value = rewrite(obj.docstring.value, module)
        for member in obj.members.values():
            if not member.is_alias:
                self._visit(member, seen)  # type: ignore[arg-type]
