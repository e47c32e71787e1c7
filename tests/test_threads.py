"""The thread policy: passive OpenMP waiting set before torch loads, thread counts capped by affinity and
the cgroup quota, the setting applied for a simulation's duration and restored after."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedsample import _threads
from fedsample._threads import ThreadsSetting, resolve_threads, usable_cpus


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("auto", True),
        (1, True),
        (1024, True),
        (0, False),
        (1025, False),
        ("two", False),
        (True, False),
        (2.0, False),
        (None, False),
    ],
)
def test_the_setting_is_auto_or_a_positive_int(value: object, ok: bool) -> None:
    assert ThreadsSetting().is_satisfied_by(value) is ok


def _fake_files(monkeypatch: pytest.MonkeyPatch, files: dict[str, str], cpus: int) -> None:
    monkeypatch.setattr(_threads, "_read", lambda path: files.get(str(path)))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)))


def test_a_cgroup_v2_quota_caps_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container limited to 150000/100000 (1.5 CPUs) on 64 CPUs gets 2; the smallest quota up the tree wins."""
    _fake_files(
        monkeypatch,
        {
            "/proc/self/cgroup": "0::/jobs/mine",
            "/sys/fs/cgroup/jobs/mine/cpu.max": "max 100000",
            "/sys/fs/cgroup/jobs/cpu.max": "150000 100000",
            "/sys/fs/cgroup/cpu.max": "800000 100000",
        },
        cpus=64,
    )
    assert usable_cpus() == 2
    assert resolve_threads("auto", current=64) == 2
    assert resolve_threads("auto", current=1) == 1  # the caller's own count, when smaller, stays
    assert resolve_threads(8, current=64) == 8  # an explicit count is the user's


def test_a_cgroup_v1_quota_and_no_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "300000", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}
    _fake_files(monkeypatch, files, cpus=16)
    assert usable_cpus() == 3
    _fake_files(monkeypatch, {"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1"}, cpus=16)
    assert usable_cpus() == 16
    _fake_files(monkeypatch, {"/proc/self/cgroup": "0::/", "/sys/fs/cgroup/cpu.max": "garbage"}, cpus=4)
    assert usable_cpus() == 4


def test_the_affinity_mask_caps_the_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_files(monkeypatch, {}, cpus=3)
    assert usable_cpus() == 3


def _policy_after(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run(
        [sys.executable, "-c", f"{code}; import os; print(os.environ.get('OMP_WAIT_POLICY'))"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent,
    )
    return out.stdout.strip().splitlines()[-1]


def test_the_engine_asks_for_passive_waiting_before_torch_loads() -> None:
    """In a fresh process: ``import fedsample.engine`` sets passive waiting; a policy the user set stays;
    after torch is imported nothing is set (OpenMP read its environment then)."""
    assert _policy_after("import fedsample.engine") == "PASSIVE"
    assert _policy_after("import fedsample.engine", OMP_WAIT_POLICY="ACTIVE") == "ACTIVE"
    assert _policy_after("import fedsample.engine", GOMP_SPINCOUNT="1000") == "None"
    assert _policy_after("import torch; import fedsample.engine") == "None"


def test_prefer_passive_waiting_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)  # as before torch is imported
    monkeypatch.setenv("OMP_WAIT_POLICY", "x")  # recorded, so that monkeypatch restores the variable
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "x")
    monkeypatch.delenv("GOMP_SPINCOUNT")
    assert _threads.prefer_passive_waiting() is True
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert _threads.prefer_passive_waiting() is False  # chosen already


def test_simulate_runs_with_the_setting_and_restores_the_callers_count() -> None:
    torch = pytest.importorskip("torch")
    import numpy as np

    from fedsample.data import FederatedDataset
    from fedsample.engine import ModelSpec, RunSpec, TrainingConfig, simulate
    from fedsample.errors import FedsampleError
    from fedsample.samplers import MDSampler

    rng = np.random.default_rng(0)
    data = FederatedDataset(
        train_features=rng.normal(size=(12, 3)).astype(np.float32),
        train_targets=rng.integers(0, 2, 12),
        train_indptr=[0, 4, 8, 12],
        test_features=np.zeros((0, 3), np.float32),
        test_targets=np.zeros(0, dtype=int),
        test_indptr=[0, 0, 0, 0],
    )
    seen: list[int] = []
    before = torch.get_num_threads()
    runs = [RunSpec(MDSampler())]
    config = TrainingConfig(rounds=2, num_sampled=2, threads=3)
    result = simulate(
        data, ModelSpec("softmax", (3,), 2), runs, config, progress=lambda _: seen.append(torch.get_num_threads())
    )
    assert seen == [3, 3]
    assert result[0].history.info["threads"] == 3
    assert torch.get_num_threads() == before
    torch.set_num_threads(1)
    try:
        auto = simulate(data, ModelSpec("softmax", (3,), 2), runs, TrainingConfig(rounds=1, num_sampled=2))
    finally:
        torch.set_num_threads(before)
    assert auto[0].history.info["threads"] == 1
    with pytest.raises(FedsampleError, match=r"'threads' parameter of TrainingConfig must be 'auto' or an int"):
        TrainingConfig(threads=0)


def test_the_threads_flag_reaches_the_config_and_bad_counts_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    import tomllib

    from cli_helpers import run_cli

    out = tmp_path / "run"
    code, _, err = run_cli(
        ["run", "default", "--set", "training.rounds=1", "--threads", "1", "-q", "--out", str(out)], capsys
    )
    assert code == 0, err
    assert tomllib.loads((out / "config.toml").read_text())["training"]["threads"] == 1
    for bad in ("0", "two", "2000"):
        code, _, err = run_cli(["run", "default", "--threads", bad, "-q", "--out", str(tmp_path / bad)], capsys)
        assert code == 2
        assert "'training.threads' key" in err
        assert len(err.strip().splitlines()) == 1
        assert not (tmp_path / bad).exists()
