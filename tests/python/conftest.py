# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the cpr package's tests: a real ckptd on 127.0.0.1 with a
temporary store (one per test session), and unique job names."""
import itertools
import os
import re
import select
import signal
import subprocess
import time

import pytest

STARTUP_TIMEOUT_S = 30.0


def _read_lines(fd, deadline):
    """ckptd's stdout up to its address line (its metrics' line comes first)."""
    data = b""
    while b"ckptd listening on " not in data or not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise RuntimeError("ckptd printed no address line within %.0f s" % STARTUP_TIMEOUT_S)
        chunk = os.read(fd, 256)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").splitlines()


class Daemon:
    """A ckptd process serving a temporary directory on 127.0.0.1."""

    def __init__(self, binary, data_dir, log_path, extra=(), listen="127.0.0.1:0"):
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [binary, "--listen", listen, "--data-dir", str(data_dir),
             "--gc-interval-s", "0", "--log-level", "warn", *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log)
        lines = _read_lines(self.proc.stdout.fileno(), time.monotonic() + STARTUP_TIMEOUT_S)
        found = {k: l[len(k):].strip() for l in lines
                 for k in ("ckptd listening on ", "ckptd metrics on ") if l.startswith(k)}
        if "ckptd listening on " not in found:
            self.proc.kill()
            raise RuntimeError("unexpected output from ckptd: %r" % lines)
        self.address = found["ckptd listening on "]
        self.metrics_address = found.get("ckptd metrics on ")
        self.target = (self.address if self.address.startswith("unix:")
                       else "grpc://" + self.address)

    def metric(self, series):
        """The value of a sample of the daemon's /metrics (with --metrics-listen)."""
        import urllib.request
        with urllib.request.urlopen("http://%s/metrics" % self.metrics_address, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(series + " "):
                    return float(line.split()[-1])
        return None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        status = self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self.log.close()
        return status


@pytest.fixture(scope="session")
def ckptd(tmp_path_factory):
    binary = os.environ.get("CPR_CKPTD")
    if not binary:
        pytest.skip("CPR_CKPTD (the ckptd binary) is not set; run through ctest")
    d = tmp_path_factory.mktemp("ckptd")
    daemon = Daemon(binary, d / "store", d / "ckptd.log")
    yield daemon
    assert daemon.stop() == 0, "ckptd did not stop cleanly on SIGTERM"


_jobs = itertools.count()


@pytest.fixture
def job(request):
    """A job name no other test uses."""
    return "py-%s-%d" % (re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:80], next(_jobs))


@pytest.fixture
def client(ckptd):
    import cpr
    with cpr.Client(ckptd.target) as c:
        yield c
