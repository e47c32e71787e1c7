"""Hostile inputs that slipped past the fuzz suite (tests/test_fuzz_inputs.py): each case here once
gave a traceback, a hang, or left files behind; now each gives exit status 2, nothing on stdout,
one stderr line naming the parameter, and leaves the working directory as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import digits_config, run_cli, snapshot

CONFIG = digits_config()
HUGE = "1" + "0" * 400  # beyond the largest float: float() raises OverflowError


def _refused(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """Run ``argv`` in ``tmp_path``; assert the one-line refusal that writes nothing; return the line."""
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    code, out, err = run_cli(argv, capsys)
    assert "Traceback" not in err
    assert (code, out, len(err.splitlines())) == (2, "", 1), err
    assert snapshot(tmp_path) == before
    return err


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("rounds = 3", f"rounds = {HUGE}", "training.rounds"),
        ("num_clients = 10", f"num_clients = {HUGE}", "federation.num_clients"),
        ("alpha = 0.5", f"alpha = {HUGE}", "federation.alpha"),
    ],
)
def test_integer_beyond_the_largest_float_in_a_config_is_refused(
    old: str, new: str, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An int of 401 digits once raised OverflowError (float() inside the range check)."""
    (tmp_path / "bad.toml").write_text(CONFIG.replace(old, new))
    err = _refused(["run", "bad.toml", "-q"], tmp_path, monkeypatch, capsys)
    assert f"'{key}'" in err


def test_integer_beyond_the_largest_float_in_set_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tiny.toml").write_text(CONFIG)
    err = _refused(["run", "tiny.toml", "-q", "--set", f"training.local_lr={HUGE}"], tmp_path, monkeypatch, capsys)
    assert "'training.local_lr'" in err
