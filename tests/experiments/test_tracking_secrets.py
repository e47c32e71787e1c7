"""No credential leaves a tracked run (docs/tracking.md): a run made with planted secrets (a password in the
MLflow store's URI, tokens and passwords in the environment) is scanned, every output of it: stdout and
stderr (at the file descriptors), Python's logging at DEBUG, every file under the test's folder (the run
directory, the MLflow stores) and every request an MLflow server received. The paths: a store that does
not answer, the SQLite store, an HTTP store that takes the run, one that fails in the middle of it, and a
resumed run (credentials given again on the command line, or in MLflow's variables).

The HTTP store is MLflow's REST API served here, over a SQLite store, by the few calls fedsample makes;
it refuses a request without the planted credentials."""

from __future__ import annotations

import base64
import json
import logging
import re
import signal
import threading
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from test_tracking import flush_after

from fedsample._interrupts import Interrupted
from fedsample.cli import main
from fedsample.experiments.config.reading import load_config
from fedsample.experiments.progress import ProgressLine
from fedsample.experiments.results.metrics import read_metrics
from fedsample.experiments.runner import CONFIG_FILE

pytest.importorskip("mlflow")
pytest.importorskip("sqlalchemy")

USER = "alice"
PASSWORD = "Pl4nted-pa55word-7Q"  # in the store's URI
PLANTED = {  # in the environment
    "MLFLOW_TRACKING_TOKEN": "pl4nted-mlflow-token-93",
    "FEDSAMPLE_TEST_SERVICE_API_KEY": "pl4nted-api-key-51",
}
SECRETS = (PASSWORD, *PLANTED.values())
# What a library's failure prints besides the tracker's line: its log records and tracebacks.
NOISE = r"Traceback|File \"|Error|ERROR|WARNING|mlflow\.|sqlalchemy|alembic|urllib3"
ROUNDS = 6
CONFIG = f"""
name = "secret"
seeds = [0, 1]
[federation]
dataset = "osmd-linear"
num_clients = 8
sigma = 3.0
[algorithm]
name = "minibatch-sgd"
[training]
rounds = {ROUNDS}
num_sampled = 2
local_steps = 1
batch_size = 8
eval_every = 2
[run]
checkpoint_every = 2
[[samplers]]
name = "md"
"""


class MLflowServer(ThreadingHTTPServer):
    """MLflow's REST API over a SQLite store (the calls of fedsample's tracker); every request recorded but its
    ``Authorization``, which must carry the planted user and password (or the planted token)."""

    def __init__(self, folder: Path) -> None:
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

        super().__init__(("127.0.0.1", 0), _Handler)
        self.backing = f"sqlite:///{folder / 'server.db'}"
        with warnings.catch_warnings():  # (SQLAlchemy's deprecations, met by MLflow's store)
            warnings.simplefilter("ignore", DeprecationWarning)
            self.store: Any = SqlAlchemyStore(self.backing, str(folder / "artifacts"))  # type: ignore[no-untyped-call]
        self.requests: list[str] = []
        self.failing = False  # log-batch calls get no answer (a server whose disk is full)
        address = f"{self.server_address[0]!s}:{self.server_address[1]}"
        self.uri = f"http://{address}"
        self.credentials_uri = f"http://{USER}:{PASSWORD}@{address}"

    def answer(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        from mlflow.entities import Metric, Param, RunTag, ViewType
        from mlflow.exceptions import MlflowException
        from mlflow.protos import service_pb2 as api
        from mlflow.protos.databricks_pb2 import ENDPOINT_NOT_FOUND, RESOURCE_DOES_NOT_EXIST
        from mlflow.utils import proto_json_utils

        protos: Any = proto_json_utils

        def plain(message: Any) -> Any:
            return json.loads(protos.message_to_json(message))

        def request(message: Any) -> Any:
            protos.parse_dict(body, message)
            return message

        store, call = self.store, path.rpartition("/api/2.0/mlflow/")[2]
        if call == "experiments/get-by-name":
            found = store.get_experiment_by_name(body["experiment_name"])
            if found is None:
                raise MlflowException("no such experiment", error_code=RESOURCE_DOES_NOT_EXIST)
            return {"experiment": plain(found.to_proto())}
        if call == "experiments/create":
            return {"experiment_id": store.create_experiment(body["name"])}
        if call == "runs/create":
            made = request(api.CreateRun())
            tags = [RunTag.from_proto(tag) for tag in made.tags]
            run = store.create_run(made.experiment_id, made.user_id, made.start_time, tags, made.run_name)
            return {"run": plain(run.to_proto())}
        if call == "runs/log-batch":
            batch = request(api.LogBatch())
            metrics = [Metric.from_proto(m) for m in batch.metrics]
            store.log_batch(batch.run_id, metrics, [Param.from_proto(p) for p in batch.params], [])
            return {}
        if call == "runs/update":
            update = request(api.UpdateRun())
            end = update.end_time if update.HasField("end_time") else None
            status = update.status if update.HasField("status") else None
            return {"run_info": plain(store.update_run_info(update.run_id, status, end, None).to_proto())}
        if call == "runs/search":
            search = request(api.SearchRuns())
            runs = store.search_runs(
                list(search.experiment_ids),
                search.filter,
                ViewType.ACTIVE_ONLY,
                search.max_results or 1000,
                list(search.order_by),
            )
            return {"runs": [plain(run.to_proto()) for run in runs]}
        if call == "runs/get":  # (MLflow's client reads a run before it changes its status)
            return {"run": plain(store.get_run(body["run_id"]).to_proto())}
        if call == "metrics/get-history":
            history = store.get_metric_history(body["run_id"], body["metric_key"])
            return {"metrics": [plain(metric.to_proto()) for metric in history]}
        raise MlflowException(f"not served here: {call}", error_code=ENDPOINT_NOT_FOUND)

    def accepts(self, authorization: str) -> bool:
        basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        return authorization in (f"Basic {basic}", f"Bearer {PLANTED['MLFLOW_TRACKING_TOKEN']}")


class _Handler(BaseHTTPRequestHandler):
    server: MLflowServer

    def do_GET(self) -> None:
        self._serve(dict(parse_qsl(urlsplit(self.path).query)))

    def do_POST(self) -> None:
        self._serve(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}"))

    def _serve(self, body: dict[str, Any]) -> None:
        from mlflow.exceptions import MlflowException

        heard = {name: value for name, value in self.headers.items() if name.lower() != "authorization"}
        self.server.requests.append(f"{self.command} {self.path} {heard} {json.dumps(body)}")
        path = urlsplit(self.path).path
        if self.server.failing and path.endswith("/runs/log-batch"):
            self.close_connection = True  # no answer at all
            return
        if not self.server.accepts(self.headers.get("Authorization", "")):
            self._reply(401, {"error_code": "UNAUTHENTICATED", "message": "credentials required"})
            return
        try:
            self._reply(200, self.server.answer(path, body))
        except MlflowException as exc:
            error: Any = exc
            self._reply(error.get_http_status_code(), json.loads(error.serialize_as_json()))

    def _reply(self, status: int, content: dict[str, Any]) -> None:
        data = json.dumps(content).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def server(tmp_path: Path) -> Iterator[MLflowServer]:
    folder = tmp_path / "server"
    folder.mkdir()
    served = MLflowServer(folder)
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    yield served
    served.shutdown()
    served.server_close()


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The planted environment, one quick HTTP try per MLflow call, and Python's logging caught at DEBUG."""
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    caplog.set_level(logging.DEBUG)


def _cli(*argv: str, capfd: pytest.CaptureFixture[str], outputs: list[str]) -> tuple[int, list[str]]:
    """Run the command line in this process; its exit status and stderr lines (both streams kept in ``outputs``)."""
    code = main(list(argv))
    out, err = capfd.readouterr()
    outputs += [out, err]
    return code, err.splitlines()


def _assert_no_secret(tmp_path: Path, outputs: list[str], caplog: pytest.LogCaptureFixture, *extra: str) -> None:
    texts = {"stdout and stderr": "\n".join(outputs), "logging": caplog.text, "server": "\n".join(extra)}
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    for secret in SECRETS:
        for where, text in texts.items():
            assert secret not in text, f"{secret!r} in {where}"
        for path in files:
            assert secret.encode() not in path.read_bytes(), f"{secret!r} in {path}"


def _config(tmp_path: Path) -> str:
    path = tmp_path / "secret.toml"
    path.write_text(CONFIG)
    return str(path)


def test_a_store_that_does_not_answer_is_refused_without_its_password(
    tmp_path: Path, planted: None, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's command: ``--mlflow-uri http://alice:PASSWORD@127.0.0.1:9`` (nothing listens on port 9)."""
    outputs: list[str] = []
    out = tmp_path / "pw"
    uri = f"http://{USER}:{PASSWORD}@127.0.0.1:9"
    code, err = _cli(
        "run", _config(tmp_path), "-q", "--mlflow-uri", uri, "--out", str(out), capfd=capfd, outputs=outputs
    )
    _assert_no_secret(tmp_path, outputs, caplog)
    assert code == 2
    assert len(err) == 1
    assert "'tracking.mlflow_uri'" in err[0]
    assert (
        "Got 'http://***@127.0.0.1:9', which failed: ConnectionRefusedError: [Errno 111] Connection refused" in err[0]
    )
    assert not out.exists()


def test_a_refused_uri_is_shown_without_its_password(
    tmp_path: Path, planted: None, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    outputs: list[str] = []
    for flags in (
        ["--mlflow-uri", f"htp://{USER}:{PASSWORD}@host"],
        ["--set", f"tracking.mlflow_uri=x://{PASSWORD}@h"],
    ):
        code, err = _cli(
            "run", _config(tmp_path), "-q", *flags, "--out", str(tmp_path / "r"), capfd=capfd, outputs=outputs
        )
        assert code == 2
        assert len(err) == 1
        assert "***@" in err[0]
    _assert_no_secret(tmp_path, outputs, caplog)


def test_a_run_into_the_sqlite_store_leaves_no_secret(
    tmp_path: Path, planted: None, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    outputs: list[str] = []
    out = tmp_path / "run"
    code, err = _cli(
        "run", _config(tmp_path), "--mlflow", "--tensorboard", "--out", str(out), capfd=capfd, outputs=outputs
    )
    assert code == 0, err
    assert (out / "mlflow.db").is_file()
    _assert_no_secret(tmp_path, outputs, caplog)


def test_a_run_into_an_http_store_with_credentials_leaves_no_secret(
    tmp_path: Path,
    planted: None,
    server: MLflowServer,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    outputs: list[str] = []
    out = tmp_path / "run"
    code, err = _cli(
        "run",
        _config(tmp_path),
        "--mlflow-uri",
        server.credentials_uri,
        "--out",
        str(out),
        capfd=capfd,
        outputs=outputs,
    )
    assert code == 0, err
    assert not [line for line in err if "tracking" in line], err
    assert load_config(out / CONFIG_FILE).tracking.mlflow_uri == server.uri  # recorded without its credentials
    _assert_stored_every_round(server, out, "FINISHED")
    _assert_no_secret(tmp_path, outputs, caplog, *server.requests)


def test_an_http_store_that_fails_mid_run_is_stopped_in_one_line_without_a_secret(
    tmp_path: Path,
    planted: None,
    server: MLflowServer,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fedsample.experiments.results.tracking import MLflowTracker

    log = MLflowTracker.log

    def failing_from_round_3(tracker: MLflowTracker, report: Any) -> None:
        server.failing = report.round >= 3
        log(tracker, report)

    monkeypatch.setattr(MLflowTracker, "log", failing_from_round_3)
    flush_after(monkeypatch, 0.0)
    outputs: list[str] = []
    out = tmp_path / "run"
    code, err = _cli(
        "run",
        _config(tmp_path),
        "--mlflow-uri",
        server.credentials_uri,
        "--out",
        str(out),
        capfd=capfd,
        outputs=outputs,
    )
    assert code == 0, err
    stopped = [line for line in err if "tracking" in line]
    assert len(stopped) == 1, err
    assert stopped[0].startswith("MLflow tracking stopped; the run goes on"), err
    assert "Remote end closed connection without response" in stopped[0], err  # the cause, under MLflow's wrapper
    assert not [line for line in err if re.search(NOISE, line) and line not in stopped], err
    assert sorted(set(read_metrics(out)["round"].tolist())) == list(range(ROUNDS + 1))
    _assert_no_secret(tmp_path, outputs, caplog, *server.requests)


@pytest.mark.parametrize("given", ["on the command line", "in MLflow's variables"])
def test_a_resumed_run_takes_its_credentials_again_and_leaves_no_secret(
    given: str,
    tmp_path: Path,
    planted: None,
    server: MLflowServer,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outputs: list[str] = []
    out = tmp_path / "run"
    update = ProgressLine.update

    def interrupt(line: ProgressLine, done: int, total: int, losses: Any = None) -> None:
        if done >= 3:
            raise Interrupted(signal.SIGINT)
        update(line, done, total, losses)

    with monkeypatch.context() as patched:
        patched.setattr(ProgressLine, "update", interrupt)
        code, err = _cli(
            "run",
            _config(tmp_path),
            "-q",
            "--mlflow-uri",
            server.credentials_uri,
            "--out",
            str(out),
            capfd=capfd,
            outputs=outputs,
        )
    assert code == 130
    assert len(err) == 1, err
    assert "resume with" in err[0]
    if given == "on the command line":
        code, err = _cli(
            "run", "--resume", str(out), "-q", "--mlflow-uri", server.credentials_uri, capfd=capfd, outputs=outputs
        )
    else:
        monkeypatch.delenv("MLFLOW_TRACKING_TOKEN")  # (the server takes it too)
        code, err = _cli("run", "--resume", str(out), "-q", capfd=capfd, outputs=outputs)
        assert code == 2  # the recorded URI has no credentials: none given, the store refuses
        assert len(err) == 1, err
        assert "'tracking.mlflow_uri'" in err[0]
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", USER)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", PASSWORD)
        code, err = _cli("run", "--resume", str(out), "-q", capfd=capfd, outputs=outputs)
    assert code == 0, err
    assert err == [], "\n".join(err)
    _assert_stored_every_round(server, out, "FINISHED")
    _assert_no_secret(tmp_path, outputs, caplog, *server.requests)


def _assert_stored_every_round(server: MLflowServer, out: Path, status: str) -> None:
    """Each MLflow run of the server's store holds every round of the metrics file once."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=server.backing)
    experiment = client.get_experiment_by_name("secret")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 2
    rounds = sorted(set(read_metrics(out)["round"].tolist()))
    for run in runs:
        steps = [metric.step for metric in client.get_metric_history(run.info.run_id, "weight_sum")]
        assert sorted(steps) == rounds[1:]  # (round 0 has no weight sum)
        assert run.info.status == status
