#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
#
# A client that takes no answer cannot hold ckptd's call slots. ckptd runs
# with --threads 4 and an idle timeout of an hour; a raw HTTP/2 client (this
# file: no gRPC stack, standard library only) opens four Health checks with a
# stream window of 0, so that no answer can be sent, and never raises it.
# The four take every slot (a well-behaved cprctl is refused "serving its
# maximum of 4 calls"), and then, long before the idle timeout, ckptd gives
# up on answers nobody takes (rpc/server.c, V2: the final batch within
# FINAL_SEND_S) and cprctl is served again. Before that bound, the slots
# stayed taken for the whole idle timeout.
#
# Usage: test_ckptd_stalled_clients.py CKPTD CPRCTL
# Exit 0 pass, 1 fail.

import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

STARTUP_TIMEOUT_S = 120.0
SLOTS_FULL_WITHIN_S = 9.0   # the four calls are dispatched at once; the bound is 10 s
SERVED_WITHIN_S = 300.0     # the idle timeout is 3600 s


def frame(typ, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([typ, flags]) + struct.pack(">I", sid) + payload


def hpack_literal(headers):
    out = b""
    for k, v in headers:
        k, v = k.encode(), v.encode()
        assert len(k) < 127 and len(v) < 127
        out += b"\x00" + bytes([len(k)]) + k + bytes([len(v)]) + v
    return out


class StalledClient:
    """HTTP/2 with SETTINGS_INITIAL_WINDOW_SIZE 0: answers' DATA never fits."""

    def __init__(self, host, port):
        self.s = socket.create_connection((host, port))
        settings = struct.pack(">HI", 4, 0)  # SETTINGS_INITIAL_WINDOW_SIZE = 0
        self.s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, settings))
        self.next_id = 1
        self.lock = threading.Lock()
        threading.Thread(target=self._ack, daemon=True).start()

    def _ack(self):
        """Acknowledge the server's SETTINGS and PINGs; read and drop the rest."""
        buf = b""
        while True:
            try:
                data = self.s.recv(65536)
            except OSError:
                return
            if not data:
                return
            buf += data
            while len(buf) >= 9:
                n = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + n:
                    break
                typ, flags, payload = buf[3], buf[4], buf[9:9 + n]
                with self.lock:
                    if typ == 4 and not flags & 1:
                        self.s.sendall(frame(4, 1, 0, b""))
                    elif typ == 6 and not flags & 1:
                        self.s.sendall(frame(6, 1, 0, payload))
                buf = buf[9 + n:]

    def health_check(self):
        with self.lock:
            sid = self.next_id
            self.next_id += 2
            headers = hpack_literal([(":method", "POST"), (":scheme", "http"),
                                     (":path", "/grpc.health.v1.Health/Check"),
                                     (":authority", "ckptd"), ("content-type", "application/grpc"),
                                     ("te", "trailers")])
            self.s.sendall(frame(1, 4, sid, headers))                  # END_HEADERS
            self.s.sendall(frame(0, 1, sid, b"\x00\x00\x00\x00\x00"))  # empty request, END_STREAM


def start_ckptd(binary, data_dir, log):
    p = subprocess.Popen([binary, "--data-dir", data_dir, "--listen", "127.0.0.1:0",
                          "--threads", "4", "--idle-part-timeout-s", "3600", "--log-level", "warn"],
                         stdout=subprocess.PIPE, stderr=log)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
            p.kill()
            sys.exit("ckptd printed no address")
        chunk = os.read(p.stdout.fileno(), 256)
        if not chunk:
            sys.exit("ckptd exited before it served")
        line += chunk
    return p, line.decode().split()[-1]


def stats(cprctl, addr):
    r = subprocess.run([cprctl, "--server", addr, "--timeout", "5", "stats"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return r.returncode, r.stderr


def main():
    ckptd, cprctl = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="cpr-stalled.")
    log = open(os.path.join(work, "ckptd.log"), "w")
    p, addr = start_ckptd(ckptd, os.path.join(work, "store"), log)
    try:
        host, port = addr.rsplit(":", 1)
        client = StalledClient(host, int(port))
        for _ in range(4):
            client.health_check()
        t0 = time.monotonic()
        full = False
        seen = []
        while time.monotonic() - t0 < SLOTS_FULL_WITHIN_S:
            rc, err = stats(cprctl, addr)
            seen.append("%.2f s: rc %d %s" % (time.monotonic() - t0, rc, err.strip()[:200]))
            if rc == 1 and "maximum of 4 calls" in err:
                full = True
                break
        if not full:
            log.flush()
            print("FAIL: the four stalled calls never took every slot; cprctl stats gave:\n  "
                  + "\n  ".join(seen) + "\nckptd's log:\n"
                  + open(os.path.join(work, "ckptd.log")).read()[-2000:])
            return 1
        # Any refusal until then is retried: on a loaded machine a stats call
        # may also run past its own 5 s deadline; only never being served fails.
        last = []
        while time.monotonic() - t0 < SERVED_WITHIN_S:
            rc, err = stats(cprctl, addr)
            if rc == 0:
                print("ok: slots taken by a client that takes no answer came back after %.1f s"
                      % (time.monotonic() - t0))
                return 0
            if p.poll() is not None:
                print("FAIL: ckptd exited (%s) while the slots were taken" % p.returncode)
                return 1
            last = (last + ["%.2f s: rc %d %s" % (time.monotonic() - t0, rc,
                                                  err.strip()[:200])])[-5:]
            time.sleep(0.2)  # a retry pace, not a synchronisation
        print("FAIL: not served for %.0f s (the idle timeout is 3600 s); the last refusals:\n  "
              % SERVED_WITHIN_S + "\n  ".join(last))
        return 1
    finally:
        p.terminate()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
