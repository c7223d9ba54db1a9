# SPDX-License-Identifier: Apache-2.0
"""examples/torch_dlrm/train.py end to end against the session's ckptd, on
synthetic Criteo rows from cpr-data gen: full recovery replays the rewound
steps and ends bit-identical to the failure-free run; CPR-MFU and CPR-SSU
recover partially, lose a small share of updates and stay close in AUC."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "..", "..", "examples", "torch_dlrm", "train.py")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    gen = os.environ.get("CPR_DATA_TOOL")
    if not gen:
        pytest.skip("CPR_DATA_TOOL (cpr-data) is not set; run through ctest")
    path = tmp_path_factory.mktemp("data") / "train.tsv"
    subprocess.run([gen, "gen", "--rows", "30000", "--seed", "2", "--cardinality", "5000",
                    "-o", str(path)], check=True, capture_output=True)
    return str(path)


def run(data, ckptd, job, strategy):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
        [sys.executable, TRAIN, "--data", data, "--target", ckptd.target, "--job", job,
         "--strategy", strategy, "--rows-per-table", "3000", "--shards", "4", "--batch", "128",
         "--failures", "3", "--failure-seed", "4", "--json"],
        capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr  # the reason, if it failed
    return json.loads(out.stdout)


def test_strategies(data, ckptd, job):
    none = run(data, ckptd, job + "-none", "none")
    full = run(data, ckptd, job + "-full", "full")
    assert full["failures"] == full["rewinds"] > 0 and full["pls"] == 0
    assert full["lost_s"] > 0 and full["checkpoints"] > 0
    assert full["auc"] == none["auc"]  # the replayed steps reproduce the run exactly
    for strategy in ("mfu", "ssu"):
        r = run(data, ckptd, "%s-%s" % (job, strategy), strategy)
        assert r["failures"] == full["failures"] and r["rewinds"] == 0 and r["lost_s"] == 0
        assert 0 < r["pls"] < 0.5
        assert abs(r["auc"] - none["auc"]) < 0.02


@pytest.mark.parametrize("transport,reads", [("tcp", "direct"), ("unix", "direct"),
                                             ("local", "direct"), ("tcp", "buffered"),
                                             ("local", "buffered"), ("unix", "plan"),
                                             ("unix", "plan-buffered")])
def test_bench_runs_and_checks_what_it_restores(tmp_path, transport, reads):
    """bench.py on a small table, through each way to the store and each way
    of reading it (ckptd --reads, Client(buffered_reads=); "plan": the client
    reads ckptd's directory itself, --direct-reads): every restore it times is
    checked bit for bit inside; here, that it ran and reported every
    figure."""
    direct = reads.startswith("plan")
    if direct:
        reads = "buffered" if reads.endswith("buffered") else "direct"
    ckptd = os.environ.get("CPR_CKPTD")
    if not ckptd:
        pytest.skip("CPR_CKPTD is not set; run through ctest")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    bench = os.path.join(HERE, "..", "..", "examples", "torch_dlrm", "bench.py")
    out = subprocess.run([sys.executable, bench, "--ckptd", ckptd, "--dir", str(tmp_path),
                          "--rows", "4000", "--dim", "8", "--repeat", "1",
                          "--transport", transport, "--reads", reads, "--json"]
                         + (["--direct-reads"] if direct else []),
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr  # the reason, if it failed
    r = json.loads(out.stdout)
    for key in ("stall_over_torch_save", "restore_speedup", "partial_speedup",
                "torch_load_vs_raw", "cpr_restore_vs_raw", "stall_over_memcpy"):
        assert r[key] > 0, key
    assert r["bytes"] == 4000 * 8 * 4 + 4000 * 4 and len(r["runs"]["cpr_stall_s"]) == 1
    assert r["transport"] == transport and r["reads"] == reads
    assert r["direct_reads"] == direct


def test_train_refuses_an_existing_job_and_ordinary_mistakes(data, ckptd, job):
    """A second run on one --job would continue the first run's checkpoints:
    refused in one line (exit 1), as are runtime errors; a bad command line
    is argparse's (exit 2). No tracebacks."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))

    def train(*args, target=ckptd.target):
        return subprocess.run(
            [sys.executable, TRAIN, "--data", data, "--target", target, "--rows-per-table",
             "500", "--shards", "2", "--batch", "64", "--max-lines", "1000", "--failures", "0",
             "--strategy", "full", "--json", *args],
            capture_output=True, text=True, env=env, timeout=300)

    first = train("--job", job)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["checkpoints"] > 0
    again = train("--job", job)
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr == ("train.py: job '%s' already has checkpoints at %s: use another "
                            "--job (each run starts a new job)\n" % (job, ckptd.target))
    down = train("--job", job + "-down", target="grpc://127.0.0.1:1")
    assert down.returncode == 1 and down.stderr.startswith("train.py: ")
    assert down.stderr.count("\n") == 1 and "Traceback" not in down.stderr
    missing = train("--job", job + "-missing", "--data", "/nonexistent/train.tsv")
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.startswith("train.py: ") and "/nonexistent" in missing.stderr
    for args, text in ((("--job", "bad job"), "--job 'bad job': a job name is 1-128"),
                       (("--job", job + "-s", "--shards", "0"), "--shards must be at least 1")):
        bad = train(*args)
        assert bad.returncode == 2 and text in bad.stderr and "Traceback" not in bad.stderr
