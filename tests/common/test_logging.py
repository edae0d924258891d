"""The harness's messages: Python logging, ``[step] message`` on stdout, DEBUG only with --verbose."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from code.common import log
from code.common.paths import REPO_ROOT


@pytest.fixture(autouse=True)
def _restore_level(monkeypatch):
    """Each test sets its own level; the next one starts from the quiet default."""
    monkeypatch.delenv(log.VERBOSE_ENV, raising=False)
    yield
    log.configure(False)
    os.environ.pop(log.VERBOSE_ENV, None)


def test_quiet_by_default_shows_info_not_debug(capsys):
    log.configure(False)
    logger = log.get_logger("run_harness")
    logger.info("logs: %s", "/tmp/x")
    logger.debug("config: secret detail")
    assert capsys.readouterr().out == "[run_harness] logs: /tmp/x\n"


def test_verbose_shows_debug_and_reaches_child_processes(capsys):
    log.configure(True)
    log.get_logger("run_single_test").debug("settings: %d", 3)
    assert capsys.readouterr().out == "[run_single_test] settings: 3\n"
    assert os.environ[log.VERBOSE_ENV] == "1"
    # A test process calls configure() with no argument and takes the level from the environment.
    probe = ("from code.common import log; log.configure(); "
             "log.get_logger('child').debug('debug reached the child')")
    child = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert child.stdout == "[child] debug reached the child\n"


def test_one_handler_however_often_configured(capsys):
    for verbose in (True, False, True):
        log.configure(verbose)
    log.get_logger("main").info("once")
    assert capsys.readouterr().out == "[main] once\n"
    assert logging.getLogger(log.ROOT).propagate is False


def test_main_verbose_logs_the_run_args():
    """--verbose through the entry point: the RUN_ARGS line is DEBUG, so it shows only with the flag."""
    args = ["-m", "code.main", "--action=info", "--benchmarks", "bert", "--system_name=NoSuchSystem"]
    quiet = subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True, text=True)
    loud = subprocess.run([sys.executable, *args, "--verbose"], cwd=REPO_ROOT, capture_output=True, text=True)
    assert "[main] RUN_ARGS:" not in quiet.stdout
    assert "[main] RUN_ARGS: --action=info --benchmarks bert --system_name=NoSuchSystem --verbose" in loud.stdout
    assert "Traceback" not in loud.stderr
