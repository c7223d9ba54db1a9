# SPDX-License-Identifier: Apache-2.0
"""A trainer's client lives through its daemon's restarts.

Six threads of one client save parts with rows and blobs while ckptd is
stopped (SIGTERM, as systemd or a rolling restart stops it) and started again
on the same port, over and over. Every call must return, OK or an error;
the process must not crash, and saves must commit again after each restart.
With gRPC's retry filter in the client's call stack, libgrpc 1.51 crashed
such a client within seconds (rpc/channel.c). The writers run in a child
process, so that a crash is this test's failure and not pytest's."""
import os
import random
import subprocess
import sys
import textwrap
import time

from conftest import Daemon

RUN_S = 15.0

WRITERS = textwrap.dedent("""
    import os, sys, threading, time
    import numpy as np
    import cpr
    target, run_s = sys.argv[1], float(sys.argv[2])
    c = cpr.Client(target, call_timeout_s=5.0, stream_timeout_s=60.0, retries=3,
                   backoff_s=0.05)
    tables = [(0, 20000, 16, 1), (1, 3000, 4, 2)]
    ok, err = [0] * 6, [0] * 6
    end = time.monotonic() + run_s
    def writer(shard):
        ckpt = 0
        while time.monotonic() < end:
            ckpt += 1
            try:
                p = c.begin("restarts", shard, ckpt, tables=tables, kind="full",
                            num_shards=6, wait=ckpt % 2 == 0)
                n = 1 + (ckpt * 977) % 3000
                ids = np.arange(shard * 3000, shard * 3000 + n, dtype=np.uint64)
                p.put_rows(0, ids, np.ones((n, 16), np.float32), np.ones((n, 1), np.float32))
                p.put_blob("blob0", b"x")
                p.put_blob("blob1", b"")
                p.commit()
                ok[shard] += 1
            except cpr.Error:
                err[shard] += 1
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c.close()
    print("committed", sum(ok), "failed", sum(err), flush=True)
    os._exit(0)  # docs/python.md: no exit handlers of gRPC at a child's end
""")


def test_writers_survive_daemon_restarts(tmp_path):
    binary = os.environ["CPR_CKPTD"]
    store, log = tmp_path / "store", tmp_path / "ckptd.log"
    daemon = Daemon(binary, store, log)  # a free port, kept for the restarts
    sock = daemon.address
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, "-c", WRITERS, daemon.target, str(RUN_S)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    rng = random.Random(7)
    restarts = 0
    try:
        end = time.monotonic() + RUN_S
        while time.monotonic() < end and child.poll() is None:
            time.sleep(rng.uniform(0.3, 1.2))  # the fault schedule, not a wait for anything
            assert daemon.stop() == 0, "ckptd did not stop cleanly on SIGTERM"
            time.sleep(rng.choice([0, 0.05, 0.3]))
            daemon = Daemon(binary, store, log, listen=sock)
            restarts += 1
        out, _ = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
        daemon.stop()
    text = out.decode(errors="replace")
    assert child.returncode == 0, "the writers' process ended with %d after %d restarts:\n%s" % (
        child.returncode, restarts, text[-3000:])
    committed = int(text.split("committed")[1].split()[0])
    assert restarts >= 5 and committed > 0, text
