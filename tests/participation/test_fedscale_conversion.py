"""docs/system.md's FedScale trace conversion, run as printed, against FedScale's completion-time formula.

FedScale (``fedscale/cloud/internal/client_metadata.py``, ``get_completion_time``) charges a client
``3 B steps computation / 1000`` seconds of work and ``(upload_size + download_size) / communication``
seconds of transfer, with sizes in units of 1024 bits (``pickled bytes * 8 / 1024``) and the bandwidth
in kbit/s. The formula is written out here from that definition, not imported.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from fedsample.participation.system import SystemModel

DOCS = Path(__file__).resolve().parents[2] / "docs" / "system.md"


def _snippet() -> str:
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("### Converting FedScale's device capacity trace") :]
    match = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert match is not None, "the FedScale section lost its code block"
    return match.group(1)


def _fedscale_seconds(ms_per_sample: float, kbps: float, samples: int, parameters: int) -> float:
    size_kbit = 32 * parameters / 1024
    return 3 * samples * ms_per_sample / 1000 + 2 * size_kbit / kbps


@pytest.mark.parametrize(("kbit", "transfer_ratio"), [(1024, 1.0), (1000, 1024 / 1000)])
def test_the_documented_conversion_gives_fedscale_round_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kbit: int, transfer_ratio: float
) -> None:
    rng = np.random.default_rng(15)
    capacity = {
        int(client_id): {"computation": float(ms), "communication": float(kbps)}
        for client_id, ms, kbps in zip(
            rng.permutation(10_000)[:12], rng.uniform(5, 300, 12), rng.uniform(200, 90_000, 12), strict=True
        )
    }
    # The test writes and then reads its own pickle: the snippet is run exactly as the docs print it.
    (tmp_path / "client_device_capacity").write_bytes(pickle.dumps(capacity))
    code = _snippet().replace("NUM_CLIENTS = 100", "NUM_CLIENTS = 10").replace("KBIT = 1000", f"KBIT = {kbit}")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(DOCS), "exec"), {"__name__": "docs_snippet"})  # the docs' own code, run as printed
    assert os.path.exists(tmp_path / "devices.csv")

    parameters, samples = 21_840, 5 * 32
    model = SystemModel(trace=str(tmp_path / "devices.csv"), latency=0.0, reference_parameters=parameters)
    systems = model.clients(10, seed=0)
    ours = systems.round_times(np.arange(10), samples, parameters, model.reference_parameters)

    kept = sorted(capacity.items())[:10]
    for client, (_, c) in enumerate(kept):
        work = 3 * samples * c["computation"] / 1000
        transfer = _fedscale_seconds(c["computation"], c["communication"], samples, parameters) - work
        assert ours[client] == pytest.approx(work + transfer * transfer_ratio, rel=1e-12)
