# SPDX-License-Identifier: Apache-2.0
"""Type stubs of cpr._cpr, the C core of the cpr package (python/src/)."""
import builtins
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

__version__: str

# Anything exporting the buffer protocol (NumPy arrays, memoryview, cpr.Array)
# or a CPU torch.Tensor (read through its zero-copy .numpy()).
ArrayLike = Any
KindLike = Union[int, str]      # cpr.Kind or "full" / "delta" / "priority"
PolicyLike = Union[int, str]    # cpr.Policy or "full" / "delta" / "mfu" / "ssu" / "topk-norm"
ModeLike = Union[int, str]      # "full" / "partial"
TableSchema = Tuple[int, int, int, int]  # (table, rows, dim, state_dim)

class Error(Exception):
    status: int
    status_name: str

class InvalidArgumentError(Error, ValueError): ...
class NotFoundError(Error, LookupError): ...
class AlreadyExistsError(Error): ...
class FailedPreconditionError(Error): ...
class CorruptError(Error):
    report: "VerifyReport"  # set when verify found problems
class IOFailureError(Error, OSError): ...
class UnavailableError(Error, ConnectionError): ...
class TimeoutError(Error, builtins.TimeoutError): ...
class NoMemoryError(Error, MemoryError): ...
class ResourceExhaustedError(Error): ...
class CudaError(Error): ...
class InternalError(Error): ...
class UnauthenticatedError(Error, PermissionError): ...
class PermissionDeniedError(Error, PermissionError): ...

class Array:
    """Rows the library allocated; shares its memory by the buffer protocol."""
    shape: Tuple[int, ...]
    format: str  # 'f' (float32), 'Q' (uint64) or 'q' (int64)
    def __len__(self) -> int: ...

class PartInfo(NamedTuple):
    shard: int
    checkpoint: int
    kind: str
    step: int
    num_shards: int
    base: int
    rows: int
    bytes: int
    committed: bool
    consistent: bool
    codecs: Tuple[str, ...]

class RestoreResult(NamedTuple):
    as_of: int
    rows: int
    bytes: int

class RestoredTable(NamedTuple):
    ids: Array
    values: Array
    state: Optional[Array]

class GcReport(NamedTuple):
    floor: int
    parts_removed: int
    versions_removed: int
    uncommitted_removed: int
    bytes_before: int
    bytes_after: int

class VerifyReport(NamedTuple):
    rows_checked: int
    blobs_checked: int
    bytes_checked: int
    problems: int
    details: List[Tuple[str, str]]

class Stats(NamedTuple):
    jobs: int
    parts_committed: int
    parts_open: int
    rows_in: int
    bytes_in: int
    rows_out: int
    bytes_out: int
    store_bytes: int
    errors: Dict[str, int]

class Progress(NamedTuple):
    rows_queued: int
    bytes_queued: int
    rows_sent: int
    bytes_sent: int
    error: Optional[str]

class PlanShard(NamedTuple):
    shard: int
    source: str
    as_of: int
    kind: str
    step: int
    dense: str
    dense_checkpoint: int
    dense_shard: int

class TrackerStats(NamedTuple):
    update_events: int
    unsaved_events: int
    dirty_rows: int
    sampled_rows: int
    touched_rows: int
    open_saves: int

class Estimate(NamedTuple):
    mode: str
    policy: int
    interval_s: float
    fraction: float
    pls: float
    mtbf_s: float
    save_s: float
    load_s: float
    restart_s: float
    full_overhead: float
    partial_overhead: float
    benefit: float
    failures: int
    codec: str
    quantized_restores: float

class Estimator:
    policy: int
    def __init__(self, shards: int, job_s: float, target_pls: float, prior_mtbf_s: float,
                 prior_save_s: float, prior_load_s: float, prior_restart_s: float, *,
                 policy: PolicyLike = ..., fraction: float = ..., full_bytes: int = ...,
                 time_unit: Optional[str] = ..., max_background_share: float = ...,
                 choose_codec: bool = ..., int4_max_restores: float = ...) -> None: ...
    def saved(self, now_s: float, policy: PolicyLike, stall_s: float, bytes: int) -> None: ...
    def background(self, policy: PolicyLike, background_s: float, cost_s: float) -> None: ...
    def loaded(self, load_s: float, shards_loaded: int) -> None: ...
    def restarted(self, restart_s: float) -> None: ...
    def failed(self, now_s: float) -> None: ...
    def tracked(self, now_s: float, update_events: int, unsaved_events: int) -> None: ...
    def decide(self) -> Estimate: ...
    def recovery_mode(self) -> str: ...

class Plan:
    action: str
    problems: List[str]
    cut: int
    rewind_step: int
    reason: str
    shards: List[PlanShard]
    def encode(self) -> bytes: ...
    @classmethod
    def decode(cls, data: bytes) -> "Plan": ...

class Part:
    job: str
    shard: int
    checkpoint: int
    state: str
    def put_rows(self, table: int, ids: ArrayLike, values: ArrayLike,
                 state: Optional[ArrayLike] = ...) -> None: ...
    def put_range(self, table: int, first: int, values: ArrayLike,
                  state: Optional[ArrayLike] = ...) -> None: ...
    def put_gather(self, table: int, values: ArrayLike, state: Optional[ArrayLike] = ..., *,
                   ids: Optional[ArrayLike] = ..., first: int = ..., n: Optional[int] = ...,
                   row_base: int = ...) -> None: ...
    def put_blob(self, name: str, data: bytes) -> None: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def progress(self) -> Progress: ...
    def __enter__(self) -> "Part": ...
    def __exit__(self, *exc: Any) -> bool: ...

class Client:
    closed: bool
    target: str
    nodes: int
    def __init__(self, target: str, *, staging_bytes: int = ..., message_bytes: int = ...,
                 call_timeout_s: float = ..., stream_timeout_s: float = ...,
                 retries: Optional[int] = ..., backoff_s: float = ..., defer_send: bool = ...,
                 thread_cpus: Optional[str] = ..., retain_cuts: int = ..., no_sync: bool = ...,
                 no_fold: bool = ..., token: Optional[str] = ...,
                 tls_ca_file: Optional[str] = ..., tls_cert_file: Optional[str] = ...,
                 tls_key_file: Optional[str] = ..., rados_pool: Optional[str] = ...,
                 rados_conf: Optional[str] = ..., rados_namespace: Optional[str] = ...,
                 rados_user: Optional[str] = ..., direct_writes: bool = ...,
                 buffered_reads: bool = ..., local_dir: Optional[str] = ...) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Client": ...
    def __exit__(self, *exc: Any) -> bool: ...
    def begin(self, job: str, shard: int, checkpoint: int, *, tables: Sequence[TableSchema],
              kind: KindLike = ..., step: int = ..., num_shards: int = ..., base: int = ...,
              wait: bool = ..., codec: Optional[Union[int, str]] = ...) -> Part: ...
    def list(self, job: str) -> List[PartInfo]: ...
    def list_jobs(self) -> List[str]: ...
    def latest_cut(self, job: str) -> int: ...
    def restore(self, job: str, *, as_of: int = ..., consistent: bool = ...,
                tables: Optional[Sequence[int]] = ...,
                ranges: Optional[Sequence[Tuple[int, int]]] = ..., modulo: int = ...,
                remainder: int = ..., shards: Optional[Sequence[int]] = ...,
                batch_rows: int = ...) -> Tuple[Dict[int, RestoredTable], RestoreResult]: ...
    def restore_into(self, job: str, table: int, values: ArrayLike,
                     state: Optional[ArrayLike] = ..., *, row_base: int = ...,
                     restored: Optional[ArrayLike] = ..., as_of: int = ...,
                     consistent: bool = ..., ranges: Optional[Sequence[Tuple[int, int]]] = ...,
                     modulo: int = ..., remainder: int = ...,
                     shards: Optional[Sequence[int]] = ..., batch_rows: int = ...
                     ) -> RestoreResult: ...
    def read_blob(self, job: str, shard: int, checkpoint: int, name: str) -> bytes: ...
    def abort(self, job: str, shard: int, checkpoint: int) -> None: ...
    def recovery_get(self, job: str) -> Tuple[int, bytes]: ...
    def recovery_put(self, job: str, expected: int, plan: bytes) -> int: ...
    def decide_and_record(self, job: str, num_shards: int, failed: Sequence[int] = ...,
                          mode: ModeLike = ..., *, expected_generation: int = ...,
                          dense_replica: bool = ..., dense_shard: int = ...,
                          restart_if_unsaved: bool = ...,
                          abandoned: Tuple[int, int] = ...) -> Tuple[Plan, int, bool]: ...
    def read_recorded(self, job: str) -> Tuple[int, Optional[Plan]]: ...
    def stats(self) -> Stats: ...
    def verify(self, job: Optional[str] = ...) -> VerifyReport: ...
    def gc(self, job: Optional[str] = ..., *, keep: int = ...) -> GcReport: ...
    def node_of(self, job: str, shard: int) -> int: ...

class TrackerSave:
    ids: Array
    state: str
    def commit(self) -> None: ...
    def abort(self) -> None: ...

class Tracker:
    rows: int
    num_shards: int
    def __init__(self, rows: int, *, num_shards: int = ..., scheme: str = ...,
                 track: Union[str, Sequence[str]] = ..., ssu_rate: float = ...,
                 ssu_capacity: int = ..., seed: int = ...) -> None: ...
    def observe(self, indices: ArrayLike, sq_change: Optional[ArrayLike] = ...) -> None: ...
    def select(self, shard: int, policy: PolicyLike, *, fraction: float = ...,
               rows: int = ...) -> Array: ...
    def begin(self, shard: int, policy: PolicyLike, ids: ArrayLike) -> TrackerSave: ...
    def stats(self, shard: int) -> TrackerStats: ...
    def events(self, shard: int) -> Tuple[int, int]: ...
    def set_ssu_rate(self, rate: float) -> None: ...
    def wipe_shard(self, shard: int) -> int: ...
    def restored(self, ids: ArrayLike) -> None: ...
    def shard_of(self, row: int) -> int: ...
    def shard_rows(self, shard: int) -> int: ...

def status_name(code: int) -> str: ...
def plan_recovery(parts: Sequence[Union[PartInfo, Sequence[Any]]], num_shards: int,
                  failed: Sequence[int] = ..., mode: ModeLike = ..., *,
                  dense_replica: bool = ..., dense_shard: int = ...,
                  restart_if_unsaved: bool = ..., abandoned: Tuple[int, int] = ...) -> Plan: ...
def read_criteo(path: str, rows_per_table: int = ..., *, max_lines: int = ...,
                skip_malformed: bool = ...) -> Tuple[Array, Array, Array]: ...
def failure_schedule(mean_steps: float, horizon_steps: int, num_shards: int, *, seed: int = ...,
                     law: str = ..., shape: float = ...) -> List[Tuple[int, int]]: ...
