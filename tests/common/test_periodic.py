"""Progress of preprocessing loops (code/common/periodic.py): plain lines when not a terminal, a tqdm bar on one,
silence for a loop shorter than a period; and the thread that calls something every period."""

import io
import time

from code.common import periodic


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_when_not_a_terminal(capsys):
    assert list(periodic.track(range(3), 3, "SQuAD questions -> features", "questions", step="preprocess_data",
                               every_s=0.0, stream=io.StringIO())) == [0, 1, 2]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[preprocess_data] SQuAD questions -> features: 1/3 questions (33 %), ETA ")
    assert lines[-1].endswith("(done)") and "\r" not in "".join(lines)


def test_a_short_loop_stays_quiet(capsys):
    assert sum(periodic.track(range(1000), 1000, "x", stream=io.StringIO())) == 499500
    assert capsys.readouterr().out == ""


def test_a_bar_on_a_terminal():
    screen = Terminal()
    assert list(periodic.track(range(4), 4, "tokenizing", "chunks", stream=screen)) == [0, 1, 2, 3]
    assert "tokenizing" in screen.getvalue() and "4/4" in screen.getvalue()


def test_the_line_without_a_total():
    assert periodic.progress_line("x", 10, None, "files", 5.0) == "x: 10 files, 2.0 files/s, 5 s elapsed"


def test_periodic_ticks_until_stopped_and_not_after():
    ticks = []
    with periodic.Periodic(lambda: ticks.append(1), 0.01, "ticker") as ticker:
        time.sleep(0.1)
    count = len(ticks)
    time.sleep(0.05)
    assert count >= 3 and len(ticks) == count and ticker.error is None


def test_a_failed_tick_ends_the_thread_and_is_heard_once():
    heard = []

    def tick():
        raise RuntimeError("gone")

    ticker = periodic.Periodic(tick, 0.01, "ticker", on_error=heard.append)
    with ticker:
        time.sleep(0.08)
    assert [str(error) for error in heard] == ["gone"] and str(ticker.error) == "gone"
