"""The dashboard in a real browser: Debian's chromium, driven through
chromedriver's W3C WebDriver API (plain HTTP, no client library).

A local ALSP cluster of 4 workers, rank 3 at 3x, trains while
`kudus dashboard` follows its monitor.  The page must gain curve points,
show every rank in the worker table and the ALSP groups, load nothing from
another origin, and replay the run to a page that connects late.  A
screenshot is kept as a test artifact (KUDUS_ARTIFACTS, default
BUILD/test-artifacts/dashboard.png).

    python3 tests/dashboard/test_dashboard.py BUILD_DIR [BASE_PORT]
"""
import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
# A random free base, drawn as the other suites draw theirs (ctest -j runs
# them side by side).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from conftest import free_base_port  # noqa: E402
BASE = int(sys.argv[2]) if len(sys.argv) > 2 else free_base_port()
WORKERS = 4
CEILING = 120       # s: waits are for events; this only ends a wait that never would
procs = []


def fail(why):
    print(f"test_dashboard: FAIL: {why}", file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(args, log):
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(p)
    return p


def cleanup():
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def wait_for_line(path, pattern, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        with open(path, encoding="utf-8", errors="replace") as f:
            m = re.search(pattern, f.read())
        if m:
            return m
        time.sleep(0.1)
    return None


class WebDriver:
    """Just enough of the W3C WebDriver protocol."""

    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"
        self.session = None

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.load(r)["value"]
        except urllib.error.HTTPError as e:
            fail(f"webdriver {method} {path}: {e.code} {e.read()[:500]!r}")

    def start(self, profile):
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1700", f"--user-data-dir={profile}"]
        caps = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": shutil.which("chromium"), "args": args}}}}
        self.session = self.call("POST", "/session", caps)["sessionId"]

    def s(self, path):
        return f"/session/{self.session}{path}"

    def go(self, url):
        self.call("POST", self.s("/url"), {"url": url})

    def js(self, script):
        return self.call("POST", self.s("/execute/sync"), {"script": script, "args": []})

    def screenshot(self, path):
        png = base64.b64decode(self.call("GET", self.s("/screenshot")))
        with open(path, "wb") as f:
            f.write(png)

    def quit(self):
        if self.session:
            self.call("DELETE", self.s(""))


def summary(wd):
    return wd.js("return window.kudusDashboard ? window.kudusDashboard.summary() : null;")


def runs(s):
    """The page's runs, but for one of stats sent before the run started
    (consistency not known yet, label '?'): a page that connects early on a
    slow machine shows one."""
    return [r for r in s["runs"] if r["label"] != "?"]


def wait_summary(wd, check, seconds, what):
    deadline = time.time() + seconds
    s = None
    while time.time() < deadline:
        s = summary(wd)
        if s and check(s):
            return s
        time.sleep(0.25)
    fail(f"{what} within {seconds} s; the page shows {s}")


def bad_stream(tmp):
    """Malformed stream messages are logged and skipped; the page still serves."""
    import zmq
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    log_path = os.path.join(tmp, "bad.log")
    dash = spawn([f"{BIN}/kudus", "dashboard", "--monitor", f"tcp://127.0.0.1:{port}",
                  "--listen", "127.0.0.1:0"], open(log_path, "w"))
    m = wait_for_line(log_path, r"http://127\.0\.0\.1:(\d+)/", 10)
    if not m:
        fail("the second dashboard did not start")
    deadline = time.time() + 10
    while time.time() < deadline and not wait_for_line(log_path, "malformed", 0.2):
        pub.send_multipart([b"stats", b"\xc1\xff\x00"])      # not MessagePack
        pub.send_multipart([b"nosuchtopic", b"\x80"])          # unknown topic
        pub.send(b"one frame only")
        pub.send_multipart([b"stats", b"\xdf\xff\xff\xff\xff"])  # a map claiming 4G entries
    if not wait_for_line(log_path, "malformed stream message", 1):
        fail(f"no error logged for malformed stream messages: {open(log_path).read()[-500:]}")
    with urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/events", timeout=5) as r:
        head = r.read(64).decode()
    if "event: hello" not in head or dash.poll() is not None:
        fail(f"the dashboard stopped serving after malformed input: {head!r}")
    pub.close(0)
    print("test_dashboard: malformed stream messages logged and skipped")


def main():
    for tool in ("chromium", "chromedriver"):
        if not shutil.which(tool):
            fail(f"{tool} is not installed (make test installs chromium and chromium-driver)")
    tmp = tempfile.mkdtemp()
    # What the runs write to TMPDIR goes with tmp.
    os.environ["TMPDIR"] = tmp
    artifacts = os.environ.get("KUDUS_ARTIFACTS", os.path.join(BIN, "test-artifacts"))
    os.makedirs(artifacts, exist_ok=True)
    wd = None
    try:
        local_log = open(os.path.join(tmp, "local.log"), "w")
        speeds = ";".join(["1"] * (WORKERS - 1) + ["3"])
        cluster = ["--workers", str(WORKERS), "--model", "mlp", "--hidden", "64", "--delay-ms", "20",
                   "--speeds", speeds, "--base-port", str(BASE), "--quiet", "true"]
        # The runs last until the test has seen what it waits for and stops
        # them: on a busy machine a run of fixed length can end before the
        # browser is even up.
        first_run = spawn([f"{BIN}/kudus", "local", "--consistency", "alsp", "--max-seconds", "900"]
                          + cluster, local_log)
        dash_log_path = os.path.join(tmp, "dashboard.log")
        dash = spawn([f"{BIN}/kudus", "dashboard", "--monitor", f"tcp://127.0.0.1:{BASE + 2}",
                      "--listen", "127.0.0.1:0"], open(dash_log_path, "w"))
        m = wait_for_line(dash_log_path, r"http://127\.0\.0\.1:(\d+)/", 10)
        if not m:
            fail(f"the dashboard did not start: {open(dash_log_path).read()[-500:]}")
        page = f"http://127.0.0.1:{m.group(1)}/"

        driver_port = free_port()
        spawn(["chromedriver", f"--port={driver_port}"], open(os.path.join(tmp, "driver.log"), "w"))
        wd = WebDriver(driver_port)
        for _ in range(100):
            try:
                urllib.request.urlopen(f"{wd.base}/status", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        wd.start(os.path.join(tmp, "profile"))
        wd.go(page)

        # The curves gain points while the cluster trains.
        first = wait_summary(wd, lambda s: s["runs"] and s["runs"][-1]["accuracy_points"] >= 2,
                             CEILING, "no accuracy points")
        # An event-driven wait with a generous ceiling: on a busy machine the
        # next evaluation can take longer than a fixed window.
        p0, a0 = first["runs"][-1]["points"], first["runs"][-1]["accuracy_points"]
        later = wait_summary(wd, lambda s: s["runs"][-1]["points"] > p0
                             and s["runs"][-1]["accuracy_points"] > a0,
                             CEILING, f"the curves to grow past {p0} points and {a0} accuracy points")
        print(f"test_dashboard: points {first['runs'][-1]['points']} -> {later['runs'][-1]['points']}")

        # Every rank has a row in the worker table, and ALSP's groups show.
        s = wait_summary(wd, lambda s: s["ranks"] == list(range(WORKERS))
                         and s["table_rows"] == WORKERS and s["groups"] == WORKERS
                         and s["shard_rows"] == 2,
                         CEILING, f"ranks 0..{WORKERS - 1} in the table, their groups and 2 shards")
        print(f"test_dashboard: table rows {s['table_rows']}, ranks {s['ranks']}, grouped {s['groups']}, "
              f"shards {s['shard_rows']}")

        # The straggler's bar is visibly longer in compute than a fast worker's.
        # The bars are windowed means of live telemetry, and a fast worker
        # starved by a loaded machine computes slowly for a while too (92 %
        # against the straggler's 60 % in a flake round): watched until the
        # straggler leads, the ceiling ending a wait that never would.
        def compute_widths():
            return wd.js("""return [...document.querySelectorAll('#workers tbody tr')].map(tr =>
                [...tr.querySelectorAll('.bar span')].map(s => parseFloat(s.style.width)));""")
        deadline = time.time() + CEILING
        widths = compute_widths()
        while widths[WORKERS - 1][0] <= max(w[0] for w in widths[:WORKERS - 1]) and time.time() < deadline:
            time.sleep(0.5)
            widths = compute_widths()
        if widths[WORKERS - 1][0] <= max(w[0] for w in widths[:WORKERS - 1]):
            fail(f"rank {WORKERS - 1} at 3x does not have the longest compute bar: {widths}")

        # Offline: every resource came from the dashboard itself.
        foreign = wd.js("""return performance.getEntriesByType('resource')
            .map(e => e.name).filter(u => !u.startsWith(location.origin));""")
        if foreign:
            fail(f"the page loaded resources from elsewhere: {foreign}")

        # A page opened late replays the run so far at once.
        before = summary(wd)["runs"][-1]["points"]
        wd.go(page)
        replay = wait_summary(wd, lambda s: s["runs"] and s["runs"][-1]["points"] >= before,
                              CEILING, f"a reloaded page replaying {before} points")
        print(f"test_dashboard: a reloaded page replayed {replay['runs'][-1]['points']} points")

        # A second run on the same ports (as `kudus experiment` runs its
        # models) is overlaid as a line of its own.
        wait_summary(wd, lambda s: runs(s) and runs(s)[0]["accuracy_points"] >= 10, CEILING,
                     "the first run's tenth accuracy point")
        first_run.send_signal(signal.SIGTERM)
        try:
            first_run.wait(timeout=CEILING)
        except subprocess.TimeoutExpired:
            fail("the first run did not stop")
        spawn([f"{BIN}/kudus", "local", "--consistency", "lsp", "--max-seconds", "900"] + cluster, local_log)
        s = wait_summary(wd, lambda s: len(runs(s)) == 2 and runs(s)[1]["accuracy_points"] >= 4,
                         CEILING, "a second run overlaid")
        labels = [r["label"] for r in runs(s)]
        if labels != ["alsp", "lsp"] or runs(s)[0]["accuracy_points"] < 10:
            fail(f"expected the alsp run then the lsp run, got {s['runs']}")
        print(f"test_dashboard: runs overlaid: {s['runs']}")
        time.sleep(1)
        shot = os.path.join(artifacts, "dashboard.png")
        wd.screenshot(shot)
        print(f"test_dashboard: screenshot {shot} ({os.path.getsize(shot)} bytes)")

        # Bad requests get errors; the dashboard keeps serving.
        for path, method, code in (("/nope", "GET", 404), ("/", "POST", 405)):
            req = urllib.request.Request(page.rstrip("/") + path, method=method, data=b"" if method == "POST" else None)
            try:
                urllib.request.urlopen(req, timeout=5)
                fail(f"{method} {path} succeeded")
            except urllib.error.HTTPError as e:
                if e.code != code:
                    fail(f"{method} {path}: {e.code}, expected {code}")
        if dash.poll() is not None:
            fail("the dashboard exited")
        bad_stream(tmp)
        print("test_dashboard: OK")
    finally:
        if wd:
            try:
                wd.quit()
            except SystemExit:
                pass
        cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
