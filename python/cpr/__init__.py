# SPDX-License-Identifier: Apache-2.0
"""CPR: fault-tolerant checkpointing for recommendation-model training.

The client (``cpr.Client``), parts (``Client.begin``), restores, blobs, the
recovery record and plans are the C library's own (``cpr._cpr``, over
``libcpr``'s public API: docs/python.md). Row data crosses by the buffer
protocol, in place: NumPy arrays and CPU torch tensors, float32 values and
int64/uint64 ids, C-contiguous. The GIL is released around every blocking
call. Errors are ``cpr.Error`` and one subclass per status.

    import numpy as np, cpr
    with cpr.Client("grpc://127.0.0.1:7000") as c:
        with c.begin("job", 0, 1, tables=[(0, 1000, 16, 1)]) as part:
            part.put_range(0, 0, np.ones((1000, 16), np.float32),
                           np.zeros((1000, 1), np.float32))
        rows, result = c.restore("job")
        values = np.asarray(rows[0].values)        # (1000, 16) float32

``cpr.torch`` checkpoints PyTorch recommendation models.
"""
import enum as _enum

from cpr._cpr import (  # noqa: F401  (re-exported)
    AlreadyExistsError,
    Array,
    Client,
    CorruptError,
    CudaError,
    Error,
    Estimate,
    Estimator,
    FailedPreconditionError,
    GcReport,
    InternalError,
    InvalidArgumentError,
    IOFailureError,
    NoMemoryError,
    NotFoundError,
    Part,
    PermissionDeniedError,
    PartInfo,
    Plan,
    PlanShard,
    Progress,
    ResourceExhaustedError,
    RestoredTable,
    RestoreResult,
    Stats,
    TimeoutError,
    Tracker,
    TrackerSave,
    TrackerStats,
    UnauthenticatedError,
    UnavailableError,
    VerifyReport,
    __version__,
    failure_schedule,
    plan_recovery,
    read_criteo,
    status_name,
)


class Kind(_enum.IntEnum):
    """What a part holds (cpr_kind): the whole shard, the rows changed since
    the shard's previous FULL/DELTA part, or a subset chosen by a policy."""

    FULL = 1
    DELTA = 2
    PRIORITY = 3


class Policy(_enum.IntEnum):
    """Which rows a save takes (cpr_policy)."""

    FULL = 0
    DELTA = 1
    MFU = 2
    SSU = 3
    TOPK_NORM = 4


class Status(_enum.IntEnum):
    """cpr_status codes; ``Error.status`` is one of them."""

    OK = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    ALREADY_EXISTS = 3
    FAILED_PRECONDITION = 4
    CORRUPT = 5
    IO = 6
    UNAVAILABLE = 7
    TIMEOUT = 8
    NO_MEMORY = 9
    RESOURCE_EXHAUSTED = 10
    CUDA = 11
    INTERNAL = 12
    UNAUTHENTICATED = 13
    PERMISSION_DENIED = 14


__all__ = [
    "AlreadyExistsError", "Array", "Client", "CorruptError", "CudaError", "Error", "Estimate", "Estimator",
    "FailedPreconditionError", "GcReport", "InternalError", "InvalidArgumentError",
    "IOFailureError", "Kind", "NoMemoryError", "NotFoundError", "Part", "PartInfo",
    "PermissionDeniedError", "Plan",
    "PlanShard", "Policy", "Progress", "ResourceExhaustedError", "RestoredTable",
    "RestoreResult", "Stats", "Status", "TimeoutError", "Tracker", "TrackerSave", "TrackerStats", "UnauthenticatedError", "UnavailableError",
    "VerifyReport",
    "failure_schedule", "plan_recovery", "read_criteo", "status_name",
]
