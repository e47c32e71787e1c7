"""Credentials kept out of everything fedsample shows or writes.

:func:`redacted` is the one place a text loses its secrets, before it is shown: the user and password
of every URL in it, the secrets the caller names (:func:`credentials` gives a store URI's password in
each form it may take), and the values of the environment's credential variables
(:func:`environment_secrets`). :func:`without_credentials` is a URI as a file records it.

>>> redacted("API request to http://alice:pa55@host:5000/api failed")
'API request to http://***@host:5000/api failed'
>>> redacted("the store said: wrong password pa55", credentials("http://alice:pa55@host"))
'the store said: wrong password ***'
>>> without_credentials("http://alice:pa55@host:5000/x"), without_credentials("sqlite:////tmp/m.db")
('http://host:5000/x', 'sqlite:////tmp/m.db')
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

__all__ = ["MASK", "credentials", "environment_secrets", "redacted", "without_credentials"]

MASK = "***"
# A URL's user information: after the scheme's "//", up to the last "@" before the host's end (a password
# with a raw "@" included).
_USERINFO = re.compile(r"(?<=//)[^/?#\s'\"<>]*@")
# Credential variables of MLflow and of the stores and clouds it reaches: their values are secrets whatever
# their length.
KNOWN_VARIABLES = frozenset(
    {
        "MLFLOW_TRACKING_PASSWORD",
        "MLFLOW_TRACKING_TOKEN",
        "DATABRICKS_TOKEN",
        "DATABRICKS_CLIENT_SECRET",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AZURE_STORAGE_ACCESS_KEY",
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_CLIENT_SECRET",
        "PGPASSWORD",
        "MYSQL_PWD",
    }
)
# Any other variable whose name says it holds a secret, when its value is long enough to be one (a short
# value, such as HF_HUB_DISABLE_IMPLICIT_TOKEN=1, is a setting: masking it would garble every message).
_SECRET_NAME = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|PRIVATE_KEY|API_KEY|ACCESS_KEY", re.IGNORECASE)
SECRET_MIN_CHARS = 8


def environment_secrets() -> set[str]:
    """The values of this process's credential variables (read now: a variable set later counts too)."""
    return {
        value
        for name, value in os.environ.items()
        if value and (name in KNOWN_VARIABLES or (_SECRET_NAME.search(name) and len(value.strip()) >= SECRET_MIN_CHARS))
    }


def credentials(uri: str) -> tuple[str, ...]:
    """The secrets a URI carries, in each form a message may show them: its password as written and
    percent-decoded, or, without a password, its user (a token passed as the user name)."""
    try:
        parts = urlsplit(uri)
        user, password = parts.username, parts.password
    except ValueError:  # not a URL at all (an unbalanced "[" in its host): its text is masked by redacted()
        return ()
    secret = password if password is not None else user
    return tuple(dict.fromkeys(form for form in (secret, unquote(secret or "")) if form))


def redacted(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` without credentials: every URL's user and password, each of ``secrets`` and each value of
    :func:`environment_secrets` replaced by ``***``."""
    for secret in sorted({*secrets, *environment_secrets()}, key=len, reverse=True):
        if secret:
            text = text.replace(secret, MASK)
    return _USERINFO.sub(f"{MASK}@", text)


def without_credentials(uri: str) -> str:
    """``uri`` without the user and password of its authority (what a file records of a store)."""
    return _USERINFO.sub("", uri, count=1)
