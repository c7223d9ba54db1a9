#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""cpr.torch against torch.save / torch.load on one table, in one run, on one disk.

A 2 M x 64 float32 table with row-wise Adagrad state (one float a row):
  raw disk        write + fsync, then a cold read, of the same bytes: the
                  machine's limit in this run;
  torch.save      + flush + fsync of {"weight", "state"}; torch.load from a
                  cold cache (the file's pages evicted with posix_fadvise);
  cpr async_save  a FULL save through cpr.torch to a ckptd started here on
                  127.0.0.1 (--transport unix: on a Unix-domain socket, as
                  a ckptd on the trainer's host) with its store in the same
                  directory: the stall (the call) and the time until every
                  part committed;
  memcpy          a copy of the same bytes between resident buffers;
  cpr restore     Checkpointer.load(): every row back into the live table in
                  place (zeroed first), the store's pages evicted first;
  cpr partial     the failure of one shard of --shards: that shard's rows
                  restored (recover), the store's pages evicted first.
Each round measures all of them in turn, so that they see the same state of the
disk (this VM's drifts); medians over the rounds are reported. Ratios:
stall_over_torch_save (goal <= 0.2), restore_speedup =
torch.load / cpr restore (goal >= 1), partial_speedup = torch.load / cpr
partial (goal >= 5), and each time against the raw disk's.

Usage: bench.py --ckptd build/ckptd/ckptd [--dir DIR] [--rows N] [--dim D]
                [--shards S] [--repeat K] [--transport tcp|unix|local]
                [--reads direct|buffered] [--direct-reads] [--json]
"""
import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import cpr
import cpr.torch


def evict(path):
    """Drop a file's (or every file's under a directory) clean pages."""
    paths = [path] if os.path.isfile(path) else [
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def raw_disk(path, nbytes):
    """Seconds to write + fsync nbytes, then to read them cold."""
    buf = memoryview(np.random.default_rng(0).integers(0, 255, 1 << 24, dtype=np.uint8))
    os.sync()  # every timed write starts with nothing else left to write back
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            left -= f.write(buf[:min(left, len(buf))])
        f.flush()
        os.fsync(f.fileno())
    write_s = time.perf_counter() - t0
    evict(path)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass
    read_s = time.perf_counter() - t0
    os.unlink(path)
    return write_s, read_s


def start_ckptd(binary, store, log, listen, reads):
    proc = subprocess.Popen([binary, "--listen", listen, "--data-dir", store,
                             "--gc-interval-s", "0", "--log-level", "warn", "--reads", reads],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
    deadline = time.monotonic() + 30
    line = b""
    while not line.endswith(b"\n"):
        if not select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            proc.kill()
            sys.exit("bench.py: ckptd printed no address within 30 s")
        chunk = os.read(proc.stdout.fileno(), 256)
        if not chunk:
            sys.exit("bench.py: ckptd exited: see %s" % log.name)
        line += chunk
    return proc, line.decode().split()[-1]


def median(xs):
    return float(np.median(xs))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ckptd", required=True, help="the ckptd binary")
    p.add_argument("--dir", help="directory on the disk to measure (default: a temporary "
                                 "directory under $TMPDIR)")
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--repeat", type=int, default=5, help="rounds; medians are reported")
    p.add_argument("--transport", choices=("tcp", "unix", "local"), default="tcp",
                   help="how the client reaches the store: ckptd on 127.0.0.1 (default), "
                   "ckptd on a Unix-domain socket (on the trainer's host), or local "
                   "(the store in this process, local://: no ckptd)")
    p.add_argument("--reads", choices=("direct", "buffered"), default="direct",
                   help="how the store reads its segments: O_DIRECT (default) or through "
                   "the page cache (ckptd --reads buffered; docs/store.md, \"Reads\")")
    p.add_argument("--direct-reads", action="store_true",
                   help="tcp/unix: the client reads ckptd's directory itself, ckptd only "
                   "plans (Client(local_dir=...); docs/client.md, \"Direct reads\")")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.direct_reads and a.transport == "local":
        p.error("--direct-reads is for a ckptd (--transport tcp or unix)")
    if a.rows < a.shards or a.dim < 1 or a.repeat < 1:
        p.error("--rows >= --shards, --dim >= 1, --repeat >= 1")
    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="cpr-torch-bench.", dir=a.dir)
    log = open(os.path.join(work, "ckptd.log"), "ab")
    proc = None
    try:
        g = torch.Generator().manual_seed(1)
        weight = torch.randn(a.rows, a.dim, generator=g)
        state = torch.rand(a.rows, generator=g)
        nbytes = weight.numel() * 4 + state.numel() * 4
        ref_w, ref_s = weight.clone(), state.clone()
        r = {k: [] for k in ("raw_write_s", "raw_read_s", "memcpy_s", "torch_save_s",
                             "torch_load_s", "cpr_stall_s", "cpr_save_s", "cpr_restore_s",
                             "cpr_partial_s")}
        # Each round measures the disk, torch and CPR one after the other, so
        # that all three see the same state of this VM's disk (its speed
        # drifts by 2x over minutes). ckptd runs no retention or folding here.
        if a.transport == "local":  # the store in this process: no ckptd
            target = "local://" + os.path.join(work, "store")
        else:
            listen = ("unix:" + os.path.join(work, "ckptd.sock") if a.transport == "unix"
                      else "127.0.0.1:0")
            proc, addr = start_ckptd(a.ckptd, os.path.join(work, "store"), log, listen,
                                     a.reads)
            target = addr if addr.startswith("unix:") else "grpc://" + addr
        # Staging holds a whole save, and sending waits for the copy to end
        # (defer_send): the stall is the copy alone (docs/python.md).
        client = cpr.Client(target, staging_bytes=nbytes + (64 << 20),
                            defer_send=True, buffered_reads=a.reads == "buffered",
                            local_dir=os.path.join(work, "store") if a.direct_reads else None)
        for rnd in range(a.repeat):
            w_s, r_s = raw_disk(os.path.join(work, "raw"), nbytes)
            r["raw_write_s"].append(w_s)
            r["raw_read_s"].append(r_s)
            t0 = time.perf_counter()  # memory's limit: a copy of the same bytes
            ref_w.copy_(weight)
            ref_s.copy_(state)
            r["memcpy_s"].append(time.perf_counter() - t0)

            path = os.path.join(work, "table.pt")
            os.sync()
            t0 = time.perf_counter()
            with open(path, "wb") as f:
                torch.save({"weight": weight, "state": state}, f)
                f.flush()
                os.fsync(f.fileno())
            r["torch_save_s"].append(time.perf_counter() - t0)
            evict(path)
            t0 = time.perf_counter()
            loaded = torch.load(path)
            r["torch_load_s"].append(time.perf_counter() - t0)
            assert torch.equal(loaded["weight"], weight)
            del loaded
            os.unlink(path)

            job = "bench-%d" % rnd
            ck = cpr.torch.Checkpointer(client, job, [weight], states={0: state},
                                        num_shards=a.shards, policy="full", hooks=False)
            os.sync()
            t0 = time.perf_counter()
            fut = ck.async_save(0)
            r["cpr_stall_s"].append(time.perf_counter() - t0)
            fut.result()
            r["cpr_save_s"].append(time.perf_counter() - t0)
            ck.wait()

            # Into the live table (resident, as a model's is), zeroed first.
            with torch.no_grad():
                weight.zero_()
                state.zero_()
            evict(os.path.join(work, "store"))
            t0 = time.perf_counter()
            res = ck.load()  # every shard at the cut, restored at once
            r["cpr_restore_s"].append(time.perf_counter() - t0)
            assert res.plan.action == "full" and res.rows == a.rows
            assert torch.equal(weight, ref_w) and torch.equal(state, ref_s)

            ck.simulate_failure(a.shards // 2)
            evict(os.path.join(work, "store"))
            t0 = time.perf_counter()
            res = ck.recover([a.shards // 2])
            r["cpr_partial_s"].append(time.perf_counter() - t0)
            assert torch.equal(weight, ref_w) and torch.equal(state, ref_s)
            assert res.rows == ck.trackers[0].shard_rows(a.shards // 2)
            ck.close()
            if not a.json:
                print("cpr round %d/%d done" % (rnd + 1, a.repeat), file=sys.stderr)
        client.close()
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        log.close()
        shutil.rmtree(work, ignore_errors=True)
    m = {k: median(v) for k, v in r.items()}
    out = {
        "rows": a.rows, "dim": a.dim, "shards": a.shards, "bytes": nbytes, "repeat": a.repeat,
        "transport": a.transport,
        "reads": a.reads,
        "direct_reads": a.direct_reads,
        **m,
        "stall_over_torch_save": m["cpr_stall_s"] / m["torch_save_s"],
        "stall_over_memcpy": m["cpr_stall_s"] / m["memcpy_s"],
        "restore_speedup": m["torch_load_s"] / m["cpr_restore_s"],
        "partial_speedup": m["torch_load_s"] / m["cpr_partial_s"],
        "torch_save_vs_raw": m["raw_write_s"] / m["torch_save_s"],
        "torch_load_vs_raw": m["raw_read_s"] / m["torch_load_s"],
        "cpr_save_vs_raw": m["raw_write_s"] / m["cpr_save_s"],
        "cpr_restore_vs_raw": m["raw_read_s"] / m["cpr_restore_s"],
        "runs": r,
    }
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            if k != "runs":
                print("%-24s %s" % (k, "%.4f" % v if isinstance(v, float) else v))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
