"""The names closest to one a user typed, for the ``Did you mean ...?`` of an error message.

A synonym (``lr`` -> ``local_lr``), the same name but for case and ``-``/``_``, a typo
(``clusterd-size`` -> ``clustered-size``, ``sdg`` -> ``sgd``), then a name holding the typed one as a
word (``clustered`` -> ``clustered-size``): :func:`close_names` ranks them by :func:`name_score`, and
:func:`did_you_mean` writes them at the end of a message (:func:`fedsample._validation.invalid`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["close_names", "did_you_mean", "edit_distance", "name_score"]


def close_names(
    value: object, choices: Iterable[str], *, synonyms: Mapping[str, Sequence[str]] | None = None, limit: int = 3
) -> tuple[str, ...]:
    """The names of ``choices`` closest to ``value``, best first (at most ``limit``; none for a non-string).

    Ranked by :func:`name_score`: the ``synonyms`` of ``value`` (``lr`` -> ``local_lr``), a name equal
    but for case and ``-``/``_``, a typo (``clusterd-size`` -> ``clustered-size``, ``sdg`` -> ``sgd``),
    then the names that hold ``value`` as a whole word (``clustered`` -> ``clustered-size``).

    >>> close_names("clusterd-size", ["md", "clustered-size", "clustered-similarity"])
    ('clustered-size',)
    >>> close_names("clustered", ["md", "clustered-size", "clustered-similarity"])
    ('clustered-size', 'clustered-similarity')
    >>> close_names("lr", ["rounds", "local_lr", "lr_decay"], synonyms={"lr": ["local_lr"]})
    ('local_lr', 'lr_decay')
    """
    if not isinstance(value, str) or not value or limit < 1:
        return ()
    names = [name for name in dict.fromkeys(choices) if isinstance(name, str) and name != value]
    scored = [(name_score(value, name, synonyms), index, name) for index, name in enumerate(names)]
    ranked = sorted((item for item in scored if item[0] > 0), key=lambda item: (-item[0], item[1]))
    return tuple(name for _, _, name in ranked[:limit])


def name_score(value: str, name: str, synonyms: Mapping[str, Sequence[str]] | None = None) -> float:
    """How close ``name`` is to the ``value`` a user typed: 0 (unrelated) to 3 (a synonym).

    A synonym scores 3, the same name but for case and ``-``/``_`` 2, a typo the larger of
    :class:`difflib.SequenceMatcher`'s ratio (counted from 0.7) and 0.9 for one edit (a letter added,
    dropped, changed, or two swapped) or 0.8 for two in a name of six letters or more; a name holding
    ``value`` as a word (of two letters or more) scores 0.5. A value of more than 100 characters is no
    name (and comparing it would cost its length times the name's): it scores 0.
    """
    if len(value) > 100:
        return 0.0
    alternatives = list((synonyms or {}).get(value, ()))
    if name in alternatives:
        return 3.0 - 0.01 * alternatives.index(name)
    typed, known = _form(value), _form(name)
    if typed == known:
        return 2.0
    ratio = difflib.SequenceMatcher(None, typed, known).ratio()
    edits = edit_distance(typed, known)
    score = max(
        ratio if ratio >= 0.7 else 0.0,
        0.9 if edits == 1 else 0.8 if edits == 2 and min(len(typed), len(known)) >= 6 else 0.0,
    )
    if score == 0 and len(typed) >= 2 and typed in _words(name):
        return 0.5
    return score


def edit_distance(first: str, second: str) -> int:
    """The edits (a character inserted, deleted or changed, or two neighbours swapped) that turn ``first``
    into ``second`` (the optimal string alignment distance).

    >>> edit_distance("sdg", "sgd"), edit_distance("clusterd", "clustered"), edit_distance("md", "uniform")
    (1, 1, 7)
    """
    previous2: list[int] = []
    previous = list(range(len(second) + 1))
    for i, a in enumerate(first, start=1):
        current = [i] + [0] * len(second)
        for j, b in enumerate(second, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a != b))
            if i > 1 and j > 1 and a == second[j - 2] and first[i - 2] == b:
                current[j] = min(current[j], previous2[j - 2] + 1)
        previous2, previous = previous, current
    return previous[-1]


def _form(name: str) -> str:
    """A name as compared for suggestions: lower case, ``_`` and blanks as ``-``."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def _words(name: str) -> list[str]:
    return [word for word in re.split(r"[-.\[\]]+", _form(name)) if word]


def did_you_mean(names: Sequence[str]) -> str:
    """`` Did you mean 'a', 'b' or 'c'?`` (empty without names)."""
    if not names:
        return ""
    quoted = [repr(name) for name in names]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
    return f" Did you mean {listed}?"
