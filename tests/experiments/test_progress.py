"""The progress display (fedsample.experiments.progress.ProgressLine): a bar redrawn in place on a terminal,
a line per tenth of the work in a log, and output that keeps coming through a long round."""

from __future__ import annotations

import io
import threading
import time

import numpy as np
import pytest

from fedsample.experiments.progress import ProgressLine, format_bar


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


class AsciiTerminal(Terminal):
    encoding = "ascii"


def _draws(text: str) -> list[str]:
    """The successive contents of a redrawn line."""
    return [part for part in text.split("\r") if part.strip()]


def test_a_terminal_gets_one_line_redrawn_in_place_with_bar_rounds_losses_and_eta() -> None:
    stream = Terminal()
    line = ProgressLine(stream=stream, interval=0.0, width=150)
    line.begin("default: 4 runs", ["md", "md", "uniform", "uniform"])
    for done in range(1, 11):
        line.update(done, 10, np.array([2.0, 1.0, 0.5, 0.25]) / done)
    line.close()
    text = stream.getvalue()
    assert text.count("\n") == 1  # one line, ended once by close()
    draws = [draw for draw in _draws(text) if "5/10 rounds" in draw]  # (the ticker may redraw a round too)
    assert all(any(f" {k}/10 rounds" in draw for draw in _draws(text)) for k in range(1, 11))
    assert draws[0].startswith("default: 4 runs: ▕██████████          ▏ 5/10 rounds (50%) | ")
    assert "elapsed, ETA" in draws[0]
    assert draws[0].rstrip().endswith("train loss md 0.3, uniform 0.075")  # seeds averaged per label
    assert all(len(draw.rstrip("\n")) == 150 for draw in _draws(text))  # padded over what was there


def test_a_redraw_is_throttled_to_the_interval_but_the_last_round_always_shows() -> None:
    stream = Terminal()
    line = ProgressLine(stream=stream, interval=60.0, width=100)
    line.begin("p", [])
    for done in range(1, 101):
        line.update(done, 100)
    line.close()
    draws = _draws(stream.getvalue())
    assert len(draws) == 2
    assert "100/100 rounds" in draws[-1]


def test_a_long_round_keeps_the_terminals_clock_moving() -> None:
    stream = Terminal()
    line = ProgressLine(stream=stream, interval=0.05, width=100)
    line.begin("slow", [])
    line.update(1, 3)
    time.sleep(0.6)  # a round that takes long: no update arrives
    drawn = len(_draws(stream.getvalue()))
    line.update(3, 3)
    line.close()
    assert drawn >= 4  # redrawn by the ticker while nothing was reported


def test_a_log_gets_a_line_per_tenth_and_never_stays_silent_for_long() -> None:
    stream = io.StringIO()
    line = ProgressLine(stream=stream, log_interval=3600)
    line.begin("logged", ["md"])
    for done in range(1, 201):
        line.update(done, 200, np.array([1.0]))
    line.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 11  # the first round, then each tenth
    assert "\r" not in stream.getvalue()
    assert lines[-1].startswith("logged: 200/200 rounds (100%) | ")
    assert "▕" not in stream.getvalue()  # no bar in a log

    quiet = io.StringIO()
    slow = ProgressLine(stream=quiet, log_interval=0.2)
    slow.begin("slow", [])
    slow.update(1, 100)
    time.sleep(1.0)
    slow.close()
    assert len(quiet.getvalue().splitlines()) >= 3  # the first line, then one every log_interval


def test_the_ticker_ends_with_the_phase() -> None:
    line = ProgressLine(stream=io.StringIO(), log_interval=0.05)
    line.begin("p", [])
    line.update(1, 2)
    ticker = line._ticker
    assert isinstance(ticker, threading.Thread)
    assert ticker.is_alive()
    line.update(2, 2)
    ticker.join(timeout=5)
    assert not ticker.is_alive()
    assert line._ticker is None
    line.close()


def test_a_message_ends_the_drawn_line_first() -> None:
    stream = Terminal()
    line = ProgressLine(stream=stream, interval=0.0, width=60)
    line.begin("p", [])
    line.update(1, 4)
    line.message("resuming from round 1")
    line.close()
    assert "ET\nresuming from round 1\n" in stream.getvalue()  # the bar line ended, then the message, whole


def test_a_terminal_without_block_characters_gets_an_ascii_bar() -> None:
    stream = AsciiTerminal()
    line = ProgressLine(stream=stream, interval=0.0, width=80)
    line.begin("p", [])
    line.update(5, 10)
    line.close()
    assert "[##########          ] 5/10 rounds" in stream.getvalue()
    assert format_bar(0.25, 8) == "▕██      ▏"
    assert format_bar(float("nan"), 3) == "▕   ▏"


def test_the_bar_fits_the_terminal_it_draws_on_not_standard_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl
    import os
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))  # a 60-column terminal
    monkeypatch.setenv("COLUMNS", "200")  # what standard output (a file, say) would report
    stream = open(follower, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    try:
        line = ProgressLine(stream=stream, interval=0.0)
        line.begin("p", ["md"])
        line.update(1, 4, np.array([1.0]))
        line.close()
        stream.flush()
        written = os.read(leader, 4096).decode()
    finally:
        stream.close()
        os.close(follower)
        os.close(leader)
    drawn = [part for part in written.replace("\r\n", "\n").split("\r") if part.strip()]
    assert drawn
    assert all(len(part.rstrip("\n")) == 59 for part in drawn)
