"""SIGINT and SIGTERM as an exception between writes (fedsample._interrupts), sent by the process to itself
at fixed points: inside an atomic write (held until the file is complete), while a run directory's lock
is taken (held, then released by the cleanup), inside an import (held until the module is complete),
outside any write (raised at once), a second time while one is held or while the command cleans up (the
process ends at once, in a new interpreter), to a process that ignores it (still ignored); and the one
line ``fedsample COMMAND: interrupted by ...`` of any command.
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import run_cli
from fedsample import _io, _reading
from fedsample._interrupts import Interrupted, deferred, raising_on_signals, reclaim_signals
from fedsample.experiments.rundir import directory as rundir
from fedsample.experiments.rundir.directory import LOCK_FILE, open_run_directory

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="needs POSIX signals")

SIGNALS = [pytest.param(signal.SIGINT, id="SIGINT"), pytest.param(signal.SIGTERM, id="SIGTERM")]


def _signal_self(signum: int) -> None:
    """Send ``signum`` to this process and run on: its Python handler runs between two bytecodes, well
    before the loop ends."""
    os.kill(os.getpid(), signum)
    for _ in range(10**6):
        pass


@pytest.mark.parametrize("signum", SIGNALS)
def test_a_signal_inside_an_atomic_write_waits_for_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    target = tmp_path / "checkpoint.npz"
    target.write_bytes(b"old")
    data = bytes(range(256)) * 64
    written: list[int] = []
    real_write = _io._write

    def write_slowly(handle: int, view: memoryview) -> int:
        if not written:
            os.kill(os.getpid(), signum)  # lands here, half-way through the file
        written.append(1)
        return real_write(handle, view[:1000])

    monkeypatch.setattr(_io, "_write", write_slowly)
    with raising_on_signals(), pytest.raises(Interrupted) as caught:
        _io.write_bytes_atomic(target, data)
    assert caught.value.signum == signum
    assert caught.value.exit_status == 128 + signum
    assert len(written) > 1  # the write went on after the signal
    assert target.read_bytes() == data
    assert _io.temporary_files(target) == []


@pytest.mark.parametrize("signum", SIGNALS)
def test_a_signal_outside_a_write_is_raised_at_once(signum: int) -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with raising_on_signals():
        with pytest.raises(Interrupted) as caught:
            _signal_self(signum)
        assert caught.value.signal_name == signal.Signals(signum).name
        with deferred():
            pass  # nothing held
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before  # the handlers restored


@pytest.mark.parametrize("signum", SIGNALS)
def test_a_signal_while_an_input_file_is_opened_is_raised_as_the_signal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    """Raised inside fdopen, which closes the descriptor, it became 'cannot be read: Bad file descriptor'."""
    path = tmp_path / "config.toml"
    path.write_text("name = 'x'\n")
    real_fdopen = os.fdopen

    def fdopen(descriptor: int, mode: str) -> Any:
        handle = real_fdopen(descriptor, mode)
        try:
            _signal_self(signum)  # lands once the file object is made, as it may in io.open
        except BaseException:
            handle.close()  # what io.open does with a file object it cannot finish
            raise
        return handle

    monkeypatch.setattr(_reading.os, "fdopen", fdopen)
    with raising_on_signals(), pytest.raises(Interrupted) as caught:
        _reading.open_input(path)
    assert caught.value.signum == signum


def _import_then_wait(name: str) -> None:
    """Import module ``name``, then wait for a held signal: it is tried again every few milliseconds."""
    importlib.import_module(name)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.001)
    pytest.fail("the signal held by the import was never raised")


@pytest.mark.parametrize("signum", SIGNALS)
def test_a_signal_during_an_import_waits_for_the_whole_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    # Raised half-way, it would leave the module half-made: PyTorch's, imported again, crashes the interpreter.
    name = f"signalled_module_{int(signum)}"
    (tmp_path / f"{name}.py").write_text(
        f"import os\nos.kill(os.getpid(), {int(signum)})\nfor _ in range(10**6):\n    pass\nCOMPLETE = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with raising_on_signals(), pytest.raises(Interrupted) as caught:
            _import_then_wait(name)
        assert caught.value.signum == signum
        assert sys.modules[name].COMPLETE
    finally:
        sys.modules.pop(name, None)


def _python(code: str, *, ignore_sigint: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a new interpreter (with SIGINT ignored from its start, as in a background job)."""
    command = [sys.executable, "-c", textwrap.dedent(code)]
    if ignore_sigint:
        command = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


SPIN = "for _ in range(10**6): pass"


@pytest.mark.parametrize(("first", "second"), [("SIGINT", "SIGTERM"), ("SIGTERM", "SIGINT"), ("SIGINT", "SIGINT")])
def test_a_second_signal_while_one_is_held_ends_the_process_at_once(first: str, second: str) -> None:
    done = _python(f"""
        import os, signal
        from fedsample._interrupts import deferred, raising_on_signals
        with raising_on_signals("fedsample test"), deferred():
            os.kill(os.getpid(), signal.{first})
            {SPIN}
            os.kill(os.getpid(), signal.{second})
            {SPIN}
            print("not ended")
    """)
    status = 128 + signal.Signals[second]
    line = f"fedsample test: interrupted by {second} again; ended at once, without cleaning up\n"
    assert (done.returncode, done.stdout, done.stderr) == (status, "", line)


def test_a_second_signal_while_the_command_cleans_up_ends_it_at_once() -> None:
    done = _python(f"""
        import os, signal
        from fedsample._interrupts import Interrupted, raising_on_signals
        with raising_on_signals("fedsample test"):
            try:
                os.kill(os.getpid(), signal.SIGINT)
                {SPIN}
            except Interrupted:
                print("cleaning up", flush=True)
                os.kill(os.getpid(), signal.SIGTERM)
                {SPIN}
                print("not ended")
    """)
    line = "fedsample test: interrupted by SIGTERM again; ended at once, without cleaning up\n"
    assert (done.returncode, done.stdout, done.stderr) == (143, "cleaning up\n", line)


def test_a_signal_ignored_from_the_start_stays_ignored() -> None:
    done = _python(
        f"""
        import os, signal
        from fedsample._interrupts import raising_on_signals
        with raising_on_signals():
            os.kill(os.getpid(), signal.SIGINT)
            {SPIN}
            print("went on")
        """,
        ignore_sigint=True,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "went on\n", "")


def test_importing_fedsample_elsewhere_than_in_its_console_script_leaves_the_signals_alone(tmp_path: Path) -> None:
    code = "import signal, fedsample\nprint(signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))\n"
    expected = f"{signal.default_int_handler} {signal.SIG_DFL}\n"
    assert _python(code).stdout == expected
    script = tmp_path / "fedsample"  # named like the console script, but not it
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False)
    assert (done.stdout, done.stderr) == (expected, "")


def test_handlers_a_library_replaced_are_reclaimed() -> None:
    with raising_on_signals():
        signal.signal(signal.SIGTERM, lambda signum, frame: None)  # as ray.init does
        reclaim_signals()
        with pytest.raises(Interrupted):
            _signal_self(signal.SIGTERM)


def test_without_the_command_lines_handlers_deferred_holds_nothing() -> None:
    with pytest.raises(KeyboardInterrupt) as caught, deferred():
        _signal_self(signal.SIGINT)
    assert not isinstance(caught.value, Interrupted)


@pytest.mark.parametrize("signum", SIGNALS)
def test_a_signal_while_the_lock_is_taken_leaves_no_lock_and_no_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signum: int
) -> None:
    real_acquire = rundir.acquire_lock

    def acquire(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signum)
        return real_acquire(*args, **kwargs)

    monkeypatch.setattr(rundir, "acquire_lock", acquire)
    out = tmp_path / "run"
    with raising_on_signals(), pytest.raises(Interrupted), open_run_directory(out):
        pytest.fail("the block is not entered: the signal is raised once the lock is taken")
    assert not out.exists()  # the lock released, the folder made for the run removed again


def test_a_signal_inside_a_run_directory_releases_its_lock(tmp_path: Path) -> None:
    out = tmp_path / "run"

    def write_then_stop() -> None:
        with open_run_directory(out):
            _io.write_text_atomic(out / "config.toml", "name = 'x'\n")
            assert (out / LOCK_FILE).exists()
            _signal_self(signal.SIGTERM)

    with raising_on_signals(), pytest.raises(Interrupted):
        write_then_stop()
    assert not (out / LOCK_FILE).exists()
    assert (out / "config.toml").read_text() == "name = 'x'\n"


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_any_command_interrupted_ends_in_one_line_with_the_signals_exit_status(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signum: int, status: int
) -> None:
    import fedsample.cli.stats as stats

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        _signal_self(signum)
        raise AssertionError("not interrupted")

    monkeypatch.setattr(stats, "compare_samplers", interrupted)
    code, out, err = run_cli(["stats", "--sizes", "3,4,5", "-m", "2"], capsys)
    assert (code, out) == (status, "")
    assert err == f"fedsample stats: interrupted by {signal.Signals(signum).name}\n"
