"""Shared fixtures of the Python suites: the build directory, and a local
cluster started with `kudus local` on a free port range."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

BIN = os.path.abspath(os.environ.get("KUDUS_BIN_DIR", "build"))
SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
os.environ.setdefault("KUDUS_LIB", os.path.join(BIN, "libkudus.so"))
sys.path.insert(0, os.path.join(SRC, "python"))


def pytest_configure(config):
    """One scratch folder for the session, removed at its end: pytest's
    tmp_path folders (pytest keeps its last three in /tmp otherwise), and,
    as TMPDIR, what a killed `kudus local` leaves (its summary)."""
    global SCRATCH
    SCRATCH = tempfile.mkdtemp(prefix="kudus-pytest-")
    os.environ["TMPDIR"] = SCRATCH
    tempfile.tempdir = None
    if not config.option.basetemp:
        config.option.basetemp = os.path.join(SCRATCH, "tmp")


def pytest_unconfigure(config):
    shutil.rmtree(SCRATCH, ignore_errors=True)


from reserve_base import free_base_port, release_base  # noqa: E402  (the same 60 bases as kd_test_base_port)


class Cluster:
    def __init__(self, tmp_path, *flags):
        self.port = free_base_port()
        self.scheduler = f"tcp://127.0.0.1:{self.port}"
        self.monitor = f"tcp://127.0.0.1:{self.port + 1}"
        self.summary_path = tmp_path / "summary.json"
        self.log = open(tmp_path / "local.log", "w")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "kudus"), "local", "--base-port", str(self.port), "--quiet", "true",
             "--summary", str(self.summary_path), *flags],
            stdout=self.log, stderr=subprocess.STDOUT)

    def wait(self, timeout):
        rc = self.proc.wait(timeout=timeout)
        self.log.close()
        return rc

    def summary(self):
        with open(self.summary_path) as f:
            return json.load(f)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # Its ports are free again: another suite may draw the base.
        release_base(self.port)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report on the test, for fixtures that say more when
    it failed."""
    outcome = yield
    setattr(item, "rep_" + outcome.get_result().when, outcome.get_result())


def telling_lines(path, limit=60):
    """A cluster log's warnings, errors and events, and its last lines:
    what a failed test needs to be understood once its scratch folder is
    gone."""
    try:
        with open(path, errors="replace") as f:
            every = [ln.rstrip() for ln in f]
    except OSError as e:
        return [f"(no log: {e})"]
    telling = [ln for ln in every[:-20]
               if any(w in ln for w in (" warn ", " error ", "event", "exited", "kudus local:"))]
    return telling[-limit:] + ["... its last lines:"] + every[-20:]


@pytest.fixture
def cluster(request, tmp_path):
    made = []

    def start(*flags):
        c = Cluster(tmp_path, *flags)
        made.append(c)
        return c
    yield start
    failed = getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed
    for c in made:
        if failed:
            # pytest shows a failed test's teardown output in its report
            # ("Captured stderr teardown"), which ctest keeps.
            state = "running" if c.proc.poll() is None else f"exited {c.proc.returncode}"
            sys.__stderr__.write(f"--- {request.node.name}: kudus local on base {c.port} ({state}):\n"
                                 + "\n".join(telling_lines(c.log.name)) + "\n")
        c.kill()
