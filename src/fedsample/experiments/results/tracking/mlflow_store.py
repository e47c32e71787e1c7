"""An MLflow store for the tracker: checked before a run directory is written, opened once it is, with
MLflow's settings, and MLflow and the libraries under it kept quiet.

The default store is the SQLite file ``RUN_DIR/mlflow.db``. Before it first imports MLflow, fedsample
switches MLflow's telemetry off and shortens its retries of a failed HTTP call, where the user did not
set them. A store's URI is shown and recorded without its credentials (:mod:`fedsample._redaction`).

>>> absolute_store_uri("sqlite:///runs/m.db", "/home/me"), absolute_store_uri("sqlite:////abs/m.db", "/x")
('sqlite:////home/me/runs/m.db', 'sqlite:////abs/m.db')
>>> absolute_store_uri("file:mlruns", "/home/me"), absolute_store_uri("http://host:5000", "/x")
('file:///home/me/mlruns', 'http://host:5000')
>>> sqlite_path("sqlite:////tmp/runs/m.db"), sqlite_path("http://host:5000")
(PosixPath('/tmp/runs/m.db'), None)
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fedsample._redaction import credentials, redacted
from fedsample.errors import FedsampleError

__all__ = [
    "MLFLOW_FILE",
    "MLFLOW_MODULES",
    "absolute_store_uri",
    "cause",
    "check_mlflow_store",
    "one_quick_try",
    "open_mlflow_store",
    "quiet",
    "release_store",
    "sqlite_path",
]

MLFLOW_FILE = "mlflow.db"
# The packages the MLflow tracker imports (its extra brings them): mlflow-skinny's SQLite store needs
# SQLAlchemy and Alembic, which it does not require itself.
MLFLOW_MODULES = ("mlflow", "sqlalchemy", "alembic")
# MLflow's own defaults retry a failed HTTP call 7 times over minutes, inside the training loop: a tracker
# of fedsample gives up sooner (settings the user made win), and sends no telemetry.
_MLFLOW_ENVIRONMENT = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}
# Within fedsample's calls, MLflow prints no URL of the store (it would show the password of an HTTP store's).
_SILENT = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}
# A store that failed is asked once more, to mark its runs FAILED: one HTTP try of 5 seconds at most.
_ONE_QUICK_TRY = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
# The loggers of MLflow and of the libraries it calls: silent while fedsample calls MLflow (a full disk
# otherwise prints hundreds of lines of their tracebacks; the tracker's one line says what failed).
_LIBRARIES = ("mlflow", "alembic", "sqlalchemy", "urllib3", "requests")
_SQLITE = re.compile(r"sqlite(?:\+\w+)?:///([^?]*)(?:\?.*)?")
# SQLAlchemy's link to its documentation, which ends every one of its errors.
_BACKGROUND = re.compile(r"\s*\(Background on this error at: [^)]*\)")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Within the block, MLflow and the libraries under it log nothing, warn nothing and print nothing (MLflow
    prints an HTTP store's URL, its password included, when it ends a run); the user's own logging,
    warnings and settings are untouched outside it."""
    roots = [logging.getLogger(name) for name in _LIBRARIES]
    children = [
        logger
        for name, logger in list(logging.Logger.manager.loggerDict.items())
        if isinstance(logger, logging.Logger) and name.partition(".")[0] in _LIBRARIES
    ]
    loggers = list(dict.fromkeys([*roots, *children]))
    saved = [(logger, logger.level, logger.disabled) for logger in loggers]
    for logger in roots:
        logger.setLevel(logging.CRITICAL + 1)  # also a logger made inside the block, which inherits it
    for logger in loggers:
        logger.disabled = True
    try:
        with warnings.catch_warnings(), _environment(_SILENT), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level, disabled in saved:
            logger.setLevel(level)
            logger.disabled = disabled


def one_quick_try() -> contextlib.AbstractContextManager[None]:
    """Within the block, an MLflow HTTP call is tried once, for 5 seconds at most."""
    return _environment(_ONE_QUICK_TRY)


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def cause(exc: BaseException, secrets: tuple[str, ...] = (), limit: int = 200) -> str:
    """``TypeName: message`` of what raised ``exc``, on one line: the last exception of its chain (SQLite's
    ``OperationalError: database or disk is full`` under SQLAlchemy's and MLflow's wrappers, a refused
    connection under the HTTP client's), without credentials (redacted before the text is cut at ``limit``
    characters, so no part of a password is left) and without SQLAlchemy's link to its documentation."""
    root, seen = exc, {id(exc)}
    while (inner := root.__cause__ or (None if root.__suppress_context__ else root.__context__)) is not None:
        if id(inner) in seen:
            break
        root = inner
        seen.add(id(root))
    text = redacted(_BACKGROUND.sub("", " ".join(str(root).split())), secrets)
    return f"{type(root).__name__}: {text[:limit]}" if text else type(root).__name__


def sqlite_path(uri: str) -> Path | None:
    """The file of a SQLite store's URI (None for another store, or SQLite in memory)."""
    found = _SQLITE.fullmatch(uri)
    if found is None or found[1] in ("", ":memory:"):
        return None
    return Path(os.path.abspath(found[1]))


def _refused(uri: str, reason: str) -> FedsampleError:
    return FedsampleError(
        f"The 'tracking.mlflow_uri' parameter must name an MLflow store that opens. Got "
        f"{redacted(uri, credentials(uri))!r}, {reason}",
        parameter="tracking.mlflow_uri",
    )


def _import_mlflow() -> None:
    """Import MLflow with fedsample's settings, outside :func:`quiet` (the import sets MLflow's own levels,
    which :func:`quiet` must see to restore them)."""
    for name, value in _MLFLOW_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import mlflow.tracking  # noqa: F401


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    if sqlite_path(uri) is not None and not os.path.exists(str(sqlite_path(uri))):
        release_store(uri)  # a store made anew where one was removed: MLflow's kept connection is stale
    return MlflowClient(tracking_uri=uri)


def check_mlflow_store(uri: str, experiment: str) -> None:
    """Refuse, in one line and writing nothing, a store that cannot work: a new SQLite file whose folder
    cannot be made or written (it is made once the run directory is open: it may lie inside it), or a
    store that does not open. ``experiment`` is looked up, not made."""
    path = sqlite_path(uri)
    if path is not None and not path.exists():
        folder = path.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            raise _refused(
                uri, f"whose file would be made under {str(folder)!r}, which is not a folder it can write in"
            )
        return
    _import_mlflow()
    with quiet():
        try:
            _client(uri).get_experiment_by_name(experiment)
        except Exception as exc:
            release_store(uri)
            raise _refused(uri, f"which failed: {cause(exc, credentials(uri))}") from None


def open_mlflow_store(uri: str, experiment: str) -> tuple[Any, str]:
    """An MLflow client of the store at ``uri`` and the id of ``experiment`` there (made if new); one line
    naming ``tracking.mlflow_uri`` when the store does not open."""
    _import_mlflow()
    with quiet():
        try:
            client = _client(uri)
            found = client.get_experiment_by_name(experiment)
            return client, found.experiment_id if found is not None else client.create_experiment(experiment)
        except Exception as exc:
            release_store(uri)
            raise _refused(uri, f"which failed: {cause(exc, credentials(uri))}") from None


def release_store(uri: str) -> None:
    """Dispose of the SQLAlchemy engine (and the store) MLflow keeps for ``uri`` for the life of the
    process: a run directory's store may be removed (``--overwrite``) and made again at the same path,
    which a kept connection would no longer reach. MLflow's private caches: nothing is done where they
    are not found."""
    with quiet(), contextlib.suppress(Exception):
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
        from mlflow.tracking._tracking_service import utils

        engine = SqlAlchemyStore._engine_map.pop(uri, None)
        if engine is not None:
            engine.dispose()
            utils._tracking_store_registry._get_store_with_resolved_uri.cache_clear()  # the stores kept per URI


def absolute_store_uri(uri: str, base: str | os.PathLike[str]) -> str:
    """A local store's URI with its path made absolute against ``base`` (``sqlite:///mlflow.db`` names a
    path relative to the working directory, which a resume from elsewhere would not find again); a URI
    with a host (``file://host/path``) is left as it is."""
    for prefix in ("sqlite:///", "file:"):
        if not uri.startswith(prefix):
            continue
        path = uri.removeprefix(prefix)
        if path.startswith("/"):
            return uri
        absolute = os.path.abspath(os.path.join(os.fspath(base), os.path.expanduser(path)))
        return f"sqlite:///{absolute}" if prefix == "sqlite:///" else f"file://{absolute}"
    return uri
