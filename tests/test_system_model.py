"""The system model (fedsample.participation.system): drawn speeds and links, the round-time formula,
the trace loader on real CSV and JSON files, hostile files, and the clock's settling of a round."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fedsample.errors import FedsampleError
from fedsample.participation.procedure import Selected, Settled, settle_participants
from fedsample.participation.setting import Participation
from fedsample.participation.system import SystemModel, load_system_trace
from fedsample.samplers import Selection


def test_round_time_is_download_plus_work_plus_upload() -> None:
    model = SystemModel(distribution="constant", compute=0.01, upload=8.0, download=32.0, latency=0.1)
    systems = model.clients(3, seed=0)
    # 10^5 parameters are 3.2 Mbit: download 0.1 + 0.1 s, work 20 samples x 0.01 s x 1, upload 0.1 + 0.4 s.
    times = systems.round_times(np.array([0, 2]), 20, 100_000, 1e5)
    np.testing.assert_allclose(times, [0.2 + 0.2 + 0.5] * 2)
    # Work scales with the model's size relative to the reference; transfers with the payload.
    double = systems.round_times(np.array([1]), 20, 200_000, 1e5)
    np.testing.assert_allclose(double, [0.1 + 0.2 + 0.4 + 0.1 + 0.8])


def test_drawn_clients_are_seeded_and_spread_as_declared() -> None:
    model = SystemModel(compute=0.01, compute_sigma=0.5)
    a, b = model.clients(20_000, seed=3), model.clients(20_000, seed=3)
    np.testing.assert_array_equal(a.compute, b.compute)
    assert not np.array_equal(a.compute, model.clients(20_000, seed=4).compute)
    logs = np.log(a.compute / 0.01)
    assert abs(np.median(a.compute) / 0.01 - 1) < 0.03
    assert abs(logs.std() - 0.5) < 0.02
    uniform = SystemModel(distribution="loguniform", bandwidth_sigma=1.0).clients(5000, seed=1)
    assert np.all(np.abs(np.log(uniform.upload / 10.0)) <= 1.0)
    assert np.log(uniform.upload / 10.0).std() > 0.5


@pytest.mark.parametrize(
    ("options", "name"),
    [({"compute": 0.0}, "compute"), ({"distribution": "normal"}, "distribution"), ({"deadline": -1.0}, "deadline")],
)
def test_bad_parameters_name_themselves(options: dict[str, object], name: str) -> None:
    with pytest.raises(FedsampleError, match=f"'{name}' parameter of SystemModel"):
        SystemModel(**options)  # type: ignore[arg-type]


def test_csv_and_json_traces_read_the_same(tmp_path: Path) -> None:
    rows = [(1, 0.02, 5.0, 20.0), (0, 0.01, 10.0, 40.0), (2, 0.5, 1.0, 2.0)]
    csv_file = tmp_path / "devices.csv"
    csv_file.write_text("client,compute,upload,download\n" + "".join(f"{c},{x},{u},{d}\n" for c, x, u, d in rows))
    json_file = tmp_path / "devices.json"
    json_file.write_text(
        json.dumps([dict(zip(("client", "compute", "upload", "download"), r, strict=False)) for r in rows])
    )
    for file in (csv_file, json_file):
        compute, upload, download = load_system_trace(file, 3)
        assert compute.tolist() == [0.01, 0.02, 0.5]
        assert upload.tolist() == [10.0, 5.0, 1.0]
        assert download.tolist() == [40.0, 20.0, 2.0]
    systems = SystemModel(trace=str(csv_file), latency=0.0).clients(3, seed=9)
    assert systems.compute.tolist() == [0.01, 0.02, 0.5]


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("a.csv", "id,compute,upload,download\n0,1,1,1\n", "header"),
        ("b.csv", "client,compute,upload,download\n0,1,1\n", "four values per row"),
        ("c.csv", "client,compute,upload,download\n0,fast,1,1\n", "three numbers"),
        ("d.csv", "client,compute,upload,download\n0,1,1,1\n0,1,1,1\n", "each client once"),
        ("e.csv", "client,compute,upload,download\n0,1,1,1\n", "a row for every client"),
        ("f.csv", "client,compute,upload,download\n0,1,1,1\n7,1,1,1\n", "client ids in [0, 2)"),
        ("g.csv", "client,compute,upload,download\n0,1,1,1\n1,nan,1,1\n", "Got (nan, 1.0, 1.0)"),
        ("h.csv", "client,compute,upload,download\n0,1,1,1\n1,1,-2,1\n", "Got (1.0, -2.0, 1.0)"),
        ("i.json", '{"client": 0}', "JSON array of objects"),
        ("j.json", '[{"client": 0, "compute": 1, "upload": 1}]', "exactly the keys"),
        ("k.json", '[{"client": 0, "compute": "1", "upload": 1, "download": 1}]', "numbers"),
        ("l.json", "[" * 100_000 + "]" * 100_000, "UTF-8 CSV or JSON"),
        ("m.json", "[{", "UTF-8 CSV or JSON"),
    ],
)
def test_hostile_traces_give_one_line_naming_the_parameter(
    tmp_path: Path, name: str, content: str, needle: str
) -> None:
    file = tmp_path / name
    file.write_text(content)
    with pytest.raises(FedsampleError) as caught:
        load_system_trace(file, 2)
    message = str(caught.value)
    assert "\n" not in message
    assert "'system.trace' parameter" in message
    assert needle in message
    assert caught.value.parameter == "system.trace"


def test_binary_and_missing_traces_are_refused(tmp_path: Path) -> None:
    binary = tmp_path / "model.pkl"
    binary.write_bytes(b"\x80\x04\x95\xff\xfe")  # a pickle header: never unpickled, not UTF-8
    for file in (binary, tmp_path / "missing.csv"):
        with pytest.raises(FedsampleError, match=r"'system\.trace' parameter"):
            load_system_trace(file, 2)


def _selected(clients: list[int], trains: list[bool]) -> Selected:
    ids = np.array(clients)
    ones = np.ones(ids.size, dtype=bool)
    selection = Selection(clients=ids, weights=np.full(ids.size, 1.0 / ids.size))
    return Selected(selection, ids, selection.weights, ones, np.array(trains), None, 0)


def _settle(
    clients: list[int], trains: list[bool], participation: Participation, num_kept: int, round_times: np.ndarray
) -> Settled:
    """Round 0 of ``clients`` (``trains``: which ones return), every update finite, no return-rate estimator."""
    finite = np.ones(len(clients), dtype=bool)
    selected = _selected(clients, trains)
    return settle_participants(
        selected, finite, participation, seed=0, round=0, num_kept=num_kept, estimator=None, round_times=round_times
    )


def test_the_clock_keeps_the_first_replies_by_time_and_waits_for_the_deadline() -> None:
    times = np.array([3.0, 1.0, 9.0, 2.0, 5.0])
    fast = Participation(system=SystemModel(), over_selection=0.5)
    settled = _settle([0, 1, 2, 3, 4], [True] * 5, fast, 3, times)
    assert settled.kept.tolist() == [True, True, False, True, False]
    assert settled.duration == 3.0
    assert settled.counts["late"] == 2
    assert settled.missed_deadline == 0
    # A deadline of 4 s: clients 2 and 4 miss it; with one dropped client the server waits until the deadline.
    strict = Participation(system=SystemModel(deadline=4.0))
    settled = _settle([0, 1, 2, 3, 4], [True, True, True, False, True], strict, 5, times)
    assert settled.kept.tolist() == [True, True, False, False, False]
    assert settled.missed_deadline == 2
    assert settled.counts["late"] == 2
    assert settled.counts["dropped"] == 1
    assert settled.duration == 4.0
    assert math.isclose(float(settled.weights.sum()), 1.0)  # renormalised over the kept clients
    # Everyone in time: the round ends at the last reply.
    settled = _settle([0, 1, 3], [True] * 3, strict, 3, times[[0, 1, 3]])
    assert settled.kept.all()
    assert settled.duration == 3.0
    assert settled.missed_deadline == 0
