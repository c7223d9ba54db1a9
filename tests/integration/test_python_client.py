#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
#
# The wire contract from a standard gRPC stack: Python stubs generated from
# proto/cpr/v1/checkpoint.proto at test time drive the real ckptd over
# grpc.insecure_channel. A part goes in (Begin, PutRows, PutBlob, Commit) and
# comes back byte-exact (List, Restore, GetBlob) with every CRC32C checked on
# our side by a pure-Python implementation; two errors map to the documented
# gRPC codes; ListJobs, Verify and Gc answer through the generated stubs;
# GetRecovery/PutRecovery record a plan by compare-and-set; a compressed
# request is refused (UNIMPLEMENTED) before it is inflated; SIGTERM stops
# the daemon with exit 0.
#
# Usage: /usr/bin/python3 test_python_client.py CKPTD_BINARY PROTO_DIR
# Needs Debian's python3-grpcio and python3-grpc-tools (deploy/install-deps.sh).
# Exit 0 pass, 1 fail, 77 skipped (this python cannot import grpc).

import ctypes
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

SKIP = 77
RPC_TIMEOUT_S = 20.0
STARTUP_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0

JOB = "py"
TABLE, TABLE_ROWS, DIM, STATE_DIM = 1, 1000, 4, 1
BLOB_NAME, BLOB_BYTES, BLOB_CHUNK_BYTES = "dense", 200_000, 64 * 1024
SVC = "/cpr.v1.Checkpoint/"


class TestFailure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise TestFailure(what)


# ---- CRC32C (Castagnoli): reflected polynomial 0x82F63B78, init/xorout ~0 ----

def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


CRC32C_TABLE = _crc32c_table()


def crc32c(data, crc=0):
    """CRC32C of `data`, continuing from the finished CRC `crc` (0 to start)."""
    crc ^= 0xFFFFFFFF
    table = CRC32C_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def rows_crc(ids, values, state):
    return crc32c(state, crc32c(values, crc32c(ids)))


# ---- stubs -------------------------------------------------------------------

def generate_stubs(proto_dir, out_dir):
    """Write cpr/v1/checkpoint_pb2{,_grpc}.py under out_dir.

    grpc_tools (Debian python3-grpc-tools 1.14.1) writes both modules; its
    protoc is older than Debian's protobuf runtime (3.21.12), but the
    old-style pb2 it writes still loads there (checked with both the cpp and
    the pure-python runtime). Should a future runtime refuse it, the pb2 is
    regenerated with the system `protoc` (protobuf-compiler), which always
    matches the runtime; the _grpc module only uses grpc and the pb2 names.
    """
    proto = os.path.join("cpr", "v1", "checkpoint.proto")
    def run(argv):
        return subprocess.run(argv, cwd=proto_dir, capture_output=True, text=True)

    gen = run([sys.executable, "-m", "grpc_tools.protoc", "-I", ".", "--python_out=" + out_dir,
               "--grpc_python_out=" + out_dir, proto])
    check(gen.returncode == 0, "grpc_tools.protoc failed:\n" + gen.stdout + gen.stderr)
    probe = subprocess.run([sys.executable, "-c", "import cpr.v1.checkpoint_pb2"], cwd=out_dir,
                           capture_output=True, text=True)
    if probe.returncode == 0:
        return "grpc_tools.protoc (--python_out and --grpc_python_out)"
    protoc = shutil.which("protoc")
    check(protoc is not None, "the pb2 from grpc_tools does not load with this protobuf "
          "runtime and there is no system protoc (protobuf-compiler):\n" + probe.stderr)
    gen = run([protoc, "-I", ".", "--python_out=" + out_dir, proto])
    check(gen.returncode == 0, "protoc --python_out failed:\n" + gen.stdout + gen.stderr)
    return "protoc (--python_out) + grpc_tools.protoc (--grpc_python_out)"


# ---- the daemon ----------------------------------------------------------------

def _die_with_parent():
    """In the child: SIGKILL if the test dies (PR_SET_PDEATHSIG), as test_ckptd.c.
    preexec_fn is safe here: the daemon starts before any channel exists, while
    this process still has a single thread."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def read_line(fd, deadline):
    """One line from fd, blocking until it arrives, EOF, or the deadline."""
    data = b""
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TestFailure("ckptd printed no address line within %.0f s" % STARTUP_TIMEOUT_S)
        chunk = os.read(fd, 256)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


def start_daemon(ckptd, data_dir, log):
    proc = subprocess.Popen([ckptd, "--listen", "127.0.0.1:0", "--data-dir", data_dir,
                             "--gc-interval-s", "0"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                            preexec_fn=_die_with_parent)
    line = read_line(proc.stdout.fileno(), time.monotonic() + STARTUP_TIMEOUT_S)
    prefix = "ckptd listening on "
    check(line.startswith(prefix), "unexpected first line from ckptd: %r (exit status %r)"
          % (line, proc.poll()))
    return proc, line[len(prefix):].strip()


def stop_daemon(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        status = proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise TestFailure("ckptd did not exit within %.0f s of SIGTERM" % STOP_TIMEOUT_S)
    check(status == 0, "ckptd exited with status %d after SIGTERM, want 0" % status)


# ---- the checkpoint ----------------------------------------------------------------

def row_values(row_id):
    """Exact float32 values (small integers and quarters) for one row."""
    values = [row_id * 0.25 + j for j in range(DIM)]
    state = [-(row_id + 0.5) for _ in range(STATE_DIM)]
    return values, state


LEASES = {}  # checkpoint -> the writer lease Begin answered with


def make_batches(pb, checkpoint, id_groups, corrupt_last=False, lease=None):
    batches = []
    for i, ids in enumerate(id_groups):
        ids_b = struct.pack("<%dQ" % len(ids), *ids)
        values, state = [], []
        for row_id in ids:
            v, s = row_values(row_id)
            values += v
            state += s
        values_b = struct.pack("<%df" % len(values), *values)
        state_b = struct.pack("<%df" % len(state), *state)
        crc = rows_crc(ids_b, values_b, state_b)
        if corrupt_last and i == len(id_groups) - 1:
            crc ^= 1
        batches.append(pb.RowBatch(job=JOB, shard=0, checkpoint=checkpoint, table=TABLE,
                                   ids=ids_b, values=values_b, state=state_b, crc32c=crc,
                                   lease=LEASES.get(checkpoint, 0) if lease is None else lease))
    return batches


def begin(pb, stub, checkpoint):
    resp = stub.Begin(pb.BeginRequest(job=JOB, shard=0, checkpoint=checkpoint, kind=pb.FULL,
                                      step=10, num_shards=1,
                                      tables=[pb.TableSchema(table=TABLE, rows=TABLE_ROWS,
                                                             dim=DIM, state_dim=STATE_DIM)]),
                      timeout=RPC_TIMEOUT_S)
    check(resp.lease != 0, "BeginResponse carries no writer lease")
    LEASES[checkpoint] = resp.lease


def put_rows(pb, stub, id_groups):
    n = sum(len(g) for g in id_groups)
    resp = stub.PutRows(iter(make_batches(pb, 1, id_groups)), timeout=RPC_TIMEOUT_S)
    check(resp.rows == n, "PutResponse.rows = %d, want %d" % (resp.rows, n))
    want_bytes = n * (8 + 4 * (DIM + STATE_DIM))
    check(resp.bytes == want_bytes, "PutResponse.bytes = %d, want %d" % (resp.bytes, want_bytes))


def check_list(pb, stub, rows):
    resp = stub.List(pb.ListRequest(job=JOB), timeout=RPC_TIMEOUT_S)
    check(len(resp.parts) == 1, "List: %d parts, want 1: %s" % (len(resp.parts), resp))
    p = resp.parts[0]
    check(p.shard == 0 and p.checkpoint == 1 and p.kind == pb.FULL, "List: wrong part %s" % p)
    check(p.committed and p.consistent, "List: part not committed+consistent: %s" % p)
    check(p.rows == rows, "List: rows = %d, want %d" % (p.rows, rows))
    check(p.num_shards == 1 and p.step == 10, "List: wrong num_shards/step: %s" % p)
    check(resp.latest_consistent == 1, "List: latest_consistent = %d, want 1"
          % resp.latest_consistent)


def check_batch_fields(b):
    check(b.table == TABLE, "Restore: batch of table %d, want %d" % (b.table, TABLE))
    check(b.dim == DIM and b.state_dim == STATE_DIM, "Restore: dim/state_dim = %d/%d, want %d/%d"
          % (b.dim, b.state_dim, DIM, STATE_DIM))
    check(b.crc32c == rows_crc(b.ids, b.values, b.state),
          "Restore: a batch's crc32c 0x%08x does not match its payload" % b.crc32c)
    n = len(b.ids) // 8
    check(len(b.ids) == 8 * n and len(b.values) == 4 * n * DIM
          and len(b.state) == 4 * n * STATE_DIM, "Restore: inconsistent batch lengths")
    return n


def check_restore(pb, stub, sent_ids):
    want = set(sent_ids)
    seen = set()
    batches = 0
    for b in stub.Restore(pb.RestoreRequest(job=JOB, batch_rows=100), timeout=RPC_TIMEOUT_S):
        n = check_batch_fields(b)
        batches += 1
        ids = struct.unpack("<%dQ" % n, b.ids)
        values = struct.unpack("<%df" % (n * DIM), b.values)
        state = struct.unpack("<%df" % (n * STATE_DIM), b.state)
        for i, row_id in enumerate(ids):
            check(row_id in want and row_id not in seen, "Restore: unexpected row id %d" % row_id)
            seen.add(row_id)
            v, s = row_values(row_id)
            check(list(values[i * DIM:(i + 1) * DIM]) == v, "Restore: row %d values %r, want %r"
                  % (row_id, values[i * DIM:(i + 1) * DIM], v))
            check(list(state[i * STATE_DIM:(i + 1) * STATE_DIM]) == s,
                  "Restore: row %d state differs" % row_id)
    check(seen == want, "Restore: %d rows back, want %d" % (len(seen), len(want)))
    check(batches >= 2, "Restore: batch_rows=100 gave %d batch(es)" % batches)


def blob_bytes():
    return bytes((i * 2654435761 >> 13) & 0xFF for i in range(BLOB_BYTES))


def blob_round_trip(pb, stub):
    blob = blob_bytes()
    chunks = [pb.BlobChunk(job=JOB, shard=0, checkpoint=1, name=BLOB_NAME, offset=off,
                           data=blob[off:off + BLOB_CHUNK_BYTES],
                           crc32c=crc32c(blob[off:off + BLOB_CHUNK_BYTES]), lease=LEASES[1])
              for off in range(0, BLOB_BYTES, BLOB_CHUNK_BYTES)]
    check(len(chunks) >= 3, "the blob should span several chunks")
    resp = stub.PutBlob(iter(chunks), timeout=RPC_TIMEOUT_S)
    check(resp.bytes == BLOB_BYTES, "PutBlob: bytes = %d, want %d" % (resp.bytes, BLOB_BYTES))
    return blob


def check_blob(pb, stub, blob):
    got = bytearray()
    req = pb.GetBlobRequest(job=JOB, shard=0, checkpoint=1, name=BLOB_NAME)
    for c in stub.GetBlob(req, timeout=RPC_TIMEOUT_S):
        check(c.offset == len(got), "GetBlob: chunk at offset %d, want %d" % (c.offset, len(got)))
        check(c.crc32c == crc32c(c.data), "GetBlob: chunk at %d fails its crc32c" % c.offset)
        check(c.size == BLOB_BYTES, "GetBlob: size = %d, want %d" % (c.size, BLOB_BYTES))
        got += c.data
    check(bytes(got) == blob, "GetBlob: %d bytes back differ from the %d sent"
          % (len(got), len(blob)))


def expect_code(grpc, code, what, fn):
    try:
        fn()
    except grpc.RpcError as e:
        check(e.code() == code, "%s: got %s (%s), want %s" % (what, e.code(), e.details(), code))
        return
    raise TestFailure("%s: succeeded, want %s" % (what, code))


def provoke_errors(grpc, pb, stub, rows):
    expect_code(grpc, grpc.StatusCode.FAILED_PRECONDITION, "Commit of a committed part",
                lambda: stub.Commit(pb.CommitRequest(job=JOB, shard=0, checkpoint=1, rows=rows),
                                    timeout=RPC_TIMEOUT_S))
    begin(pb, stub, 2)
    # Parts belong to their writer: rows or a commit without the lease (or
    # with another) are refused and change nothing.
    for lease in (0, LEASES[2] ^ 1):
        expect_code(grpc, grpc.StatusCode.PERMISSION_DENIED, "PutRows without the lease",
                    lambda: stub.PutRows(iter(make_batches(pb, 2, [[1, 2]], lease=lease)),
                                         timeout=RPC_TIMEOUT_S))
        expect_code(grpc, grpc.StatusCode.PERMISSION_DENIED, "Commit without the lease",
                    lambda: stub.Commit(pb.CommitRequest(job=JOB, shard=0, checkpoint=2, rows=0,
                                                         lease=lease), timeout=RPC_TIMEOUT_S))
    # A compressed message is refused before gRPC inflates it (a few MB of
    # gzip would otherwise become gigabytes ahead of every limit).
    expect_code(grpc, grpc.StatusCode.UNIMPLEMENTED, "a gzip-compressed Restore",
                lambda: list(stub.Restore(pb.RestoreRequest(job=JOB, direct="a" * (1 << 20)),
                                          timeout=RPC_TIMEOUT_S,
                                          compression=grpc.Compression.Gzip)))
    # Restore-only fields in a batch to store: refused, the part untouched.
    expect_code(grpc, grpc.StatusCode.INVALID_ARGUMENT, "PutRows with a plan",
                lambda: stub.PutRows(iter([pb.RowBatch(job=JOB, shard=0, checkpoint=2,
                                                       lease=LEASES[2], plan=b"x")]),
                                     timeout=RPC_TIMEOUT_S))
    bad = make_batches(pb, 2, [[1, 2, 3], [4, 5, 6]], corrupt_last=True)
    expect_code(grpc, grpc.StatusCode.DATA_LOSS, "PutRows with a wrong crc32c",
                lambda: stub.PutRows(iter(bad), timeout=RPC_TIMEOUT_S))
    expect_code(grpc, grpc.StatusCode.FAILED_PRECONDITION, "Commit of the aborted part 2",
                lambda: stub.Commit(pb.CommitRequest(job=JOB, shard=0, checkpoint=2, rows=6,
                                                     lease=LEASES[2]), timeout=RPC_TIMEOUT_S))


def check_operations(grpc, pb, stub, rows):
    """ListJobs, Verify and Gc through the generated stubs."""
    jobs = stub.ListJobs(pb.ListJobsRequest(), timeout=RPC_TIMEOUT_S)
    check(list(jobs.jobs) == [JOB], "ListJobs: %r, want [%r]" % (list(jobs.jobs), JOB))
    v = stub.Verify(pb.VerifyRequest(job=JOB), timeout=RPC_TIMEOUT_S)
    check(v.problems == 0 and len(v.details) == 0, "Verify: problems on an intact store: %s" % v)
    check(v.rows_checked == rows and v.blobs_checked == 1,
          "Verify: rows_checked %d, blobs_checked %d, want %d and 1"
          % (v.rows_checked, v.blobs_checked, rows))
    check(v.bytes_checked >= BLOB_BYTES, "Verify: bytes_checked = %d" % v.bytes_checked)
    expect_code(grpc, grpc.StatusCode.NOT_FOUND, "Verify of an unknown job",
                lambda: stub.Verify(pb.VerifyRequest(job="nosuchjob"), timeout=RPC_TIMEOUT_S))
    g = stub.Gc(pb.GcRequest(job=JOB), timeout=RPC_TIMEOUT_S)  # one cut of the 2 kept
    check(g.parts_removed == 0 and g.versions_removed == 0, "Gc removed data: %s" % g)
    check(g.bytes_after > 0, "Gc: bytes_after = %d" % g.bytes_after)
    expect_code(grpc, grpc.StatusCode.FAILED_PRECONDITION, "Gc to a floor above the newest",
                lambda: stub.Gc(pb.GcRequest(job=JOB, floor=5), timeout=RPC_TIMEOUT_S))


def check_recovery(grpc, pb, stub):
    """GetRecovery/PutRecovery: no record, one put, a losing put, the record back."""
    job = "pyrec"
    r = stub.GetRecovery(pb.GetRecoveryRequest(job=job), timeout=RPC_TIMEOUT_S)
    check(r.generation == 0 and r.plan == b"" and r.written_unix_ms == 0,
          "GetRecovery without a record: %s" % r)
    plan = b'{"cpr_plan":1,"action":"partial"}\x00\xff'  # opaque bytes to the daemon
    before_ms = int(time.time() * 1000)
    w = stub.PutRecovery(pb.PutRecoveryRequest(job=job, expected_generation=0, plan=plan),
                         timeout=RPC_TIMEOUT_S)
    check(w.job == job and w.generation == 1, "PutRecovery: %s, want generation 1" % w)
    check(w.written_unix_ms >= before_ms - 5000, "PutRecovery: written_unix_ms %d is before "
          "the call (%d)" % (w.written_unix_ms, before_ms))
    try:
        stub.PutRecovery(pb.PutRecoveryRequest(job=job, expected_generation=0, plan=b"late"),
                         timeout=RPC_TIMEOUT_S)
        raise TestFailure("a second PutRecovery at generation 0 succeeded")
    except grpc.RpcError as e:
        check(e.code() == grpc.StatusCode.FAILED_PRECONDITION and "generation 1" in e.details(),
              "losing PutRecovery: %s %r" % (e.code(), e.details()))
    r = stub.GetRecovery(pb.GetRecoveryRequest(job=job), timeout=RPC_TIMEOUT_S)
    check(r.generation == 1 and r.plan == plan and r.written_unix_ms == w.written_unix_ms,
          "GetRecovery after the put: %s" % r)
    expect_code(grpc, grpc.StatusCode.INVALID_ARGUMENT, "GetRecovery of a bad job name",
                lambda: stub.GetRecovery(pb.GetRecoveryRequest(job="no/such"),
                                         timeout=RPC_TIMEOUT_S))


def check_health(stub_channel):
    """grpc.health.v1.Health/Check by hand: empty request, {status: SERVING} back."""
    check_rpc = stub_channel.unary_unary("/grpc.health.v1.Health/Check")
    resp = check_rpc(b"", timeout=RPC_TIMEOUT_S)
    check(resp == b"\x08\x01", "Health/Check: %r, want SERVING (b'\\x08\\x01')" % resp)


def exercise(grpc, pb, pb_grpc, addr):
    # Rows 0, 3, 6, ... < 1000 (not contiguous) in three batches.
    sent_ids = list(range(0, TABLE_ROWS, 3))
    groups = [sent_ids[0:100], sent_ids[100:250], sent_ids[250:]]
    with grpc.insecure_channel(addr) as channel:
        stub = pb_grpc.CheckpointStub(channel)
        check_health(channel)
        begin(pb, stub, 1)
        put_rows(pb, stub, groups)
        blob = blob_round_trip(pb, stub)
        stub.Commit(pb.CommitRequest(job=JOB, shard=0, checkpoint=1, rows=len(sent_ids),
                                     lease=LEASES[1]), timeout=RPC_TIMEOUT_S)
        check_list(pb, stub, len(sent_ids))
        check_restore(pb, stub, sent_ids)
        check_blob(pb, stub, blob)
        provoke_errors(grpc, pb, stub, len(sent_ids))
        check_list(pb, stub, len(sent_ids))  # the aborted part 2 left no trace
        check_operations(grpc, pb, stub, len(sent_ids))
        check_restore(pb, stub, sent_ids)  # Gc kept everything
        check_recovery(grpc, pb, stub)
        check_health(channel)  # still serving


def main(argv):
    if len(argv) != 3:
        print("usage: test_python_client.py CKPTD_BINARY PROTO_DIR", file=sys.stderr)
        return 2
    try:
        import grpc
    except ImportError as e:
        print("SKIP: %s cannot import grpc (%s); install python3-grpcio and "
              "python3-grpc-tools (deploy/install-deps.sh)" % (sys.executable, e))
        return SKIP
    check(crc32c(b"123456789") == 0xE3069283, "crc32c check value is wrong")
    ckptd, proto_dir = os.path.abspath(argv[1]), os.path.abspath(argv[2])
    with tempfile.TemporaryDirectory(prefix="cpr-pyclient-") as tmp:
        stubs, data_dir = os.path.join(tmp, "stubs"), os.path.join(tmp, "data")
        os.mkdir(stubs)
        how = generate_stubs(proto_dir, stubs)
        sys.path.insert(0, stubs)
        from cpr.v1 import checkpoint_pb2 as pb, checkpoint_pb2_grpc as pb_grpc
        log_path = os.path.join(tmp, "ckptd.log")
        proc = None
        with open(log_path, "wb") as log:
            try:
                proc, addr = start_daemon(ckptd, data_dir, log)
                exercise(grpc, pb, pb_grpc, addr)
                stop_daemon(proc)
            except BaseException:
                with open(log_path, errors="replace") as f:
                    sys.stderr.write("---- ckptd log ----\n" + f.read()[-8000:])
                raise
            finally:
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()
                if proc is not None:
                    proc.stdout.close()
    print("ok: grpc %s, stubs by %s, ckptd at %s" % (grpc.__version__, how, addr))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except TestFailure as e:
        print("FAIL: %s" % e, file=sys.stderr)
        sys.exit(1)
