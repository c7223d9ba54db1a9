/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Writer leases (issue #11): a part belongs to the writer that began it.
 * Begin grants a random 64-bit lease; every later PutRows, PutBlob, Commit
 * and Abort of the part must present it, and any other caller is refused
 * with CPR_PERMISSION_DENIED before the store is touched, so nothing
 * changes. Leases live in the daemon, the trust boundary: the store API
 * (and local://, one process) knows nothing of them.
 *
 * Invariants
 *  L1. An entry exists from a successful Begin until the part's Commit or
 *      Abort succeeds (or a sweep finds the part no longer open: aborted
 *      by the idle reaper or a broken stream). A Begin of the same id
 *      replaces the entry: the store refuses a Begin of a part that is
 *      open, so a replaced entry belonged to a part that is gone.
 *  L2. A put or commit of a part without an entry is refused as for a part
 *      that is not open, before the store sees it: between the store's
 *      Begin and the grant the part is open without a lease, and nobody
 *      holds its lease yet, so nobody may write to it. (ckptd has no open
 *      part it did not begin: the store aborts open parts when it opens.)
 *      A refusal of a wrong lease asks the store first: a part that is no
 *      longer open there (its entry not yet dropped, L1) is refused as not
 *      open, not as another writer's (test_ckptd_kill's vanished client
 *      saw PERMISSION_DENIED in that window once).
 *  L3. Leases come from getrandom(2) and are never 0 (0 means "none").
 *  L4. An entry keeps the token its Begin carried (BeginRequest.begin_token;
 *      0: none). A Begin of a part that is open under an entry with the
 *      same non-zero token is its writer's Begin sent again (the answer to
 *      the first was lost): it is answered with that entry's lease, and
 *      nothing changes. A token is a writer's secret as a lease is, drawn at
 *      random by the client for each part.
 *  L5. An entry keeps the incarnation of the store's part it was granted
 *      for (ckptd/store/part_fence.h S9), and every store call a lease
 *      allows is fenced to it: if the part is aborted (the idle reaper)
 *      and begun again by another writer between the lease check and the
 *      call, the call finds no open part, instead of writing, committing or
 *      aborting the new writer's part.
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef CPR_CKPTD_LEASES_H
#define CPR_CKPTD_LEASES_H

#include <stdint.h>

#include "cpr/store.h"

typedef struct cpri_leases cpri_leases;

cpr_status cpri_leases_create(cpr_store *store, cpri_leases **out);
void cpri_leases_destroy(cpri_leases *l); /* NULL is a no-op */

/* A fresh lease for `id` (replacing any, L1), remembering the Begin's
 * token (L4) and the store part's incarnation (L5); call after the store's
 * Begin succeeded. */
cpr_status cpri_leases_grant(cpri_leases *l, const cpr_part_id *id, uint64_t token,
                             uint64_t incarnation, uint64_t *lease);

/* L4: the lease of id's entry if it was granted to a Begin with `token`
 * (not 0); 0 otherwise. */
uint64_t cpri_leases_resume(cpri_leases *l, const cpr_part_id *id, uint64_t token);

/* CPR_OK if `lease` is id's, with its part's incarnation in *incarnation
 * (may be NULL; L5: fence the store call with it); CPR_PERMISSION_DENIED
 * naming `op` if id has another; CPR_FAILED_PRECONDITION if id has none
 * (L2: not open). */
cpr_status cpri_leases_check(cpri_leases *l, const cpr_part_id *id, uint64_t lease,
                             const char *op, uint64_t *incarnation);

/* id's lease, 0 if none: an Abort without it is then an override. */
uint64_t cpri_leases_get(cpri_leases *l, const cpr_part_id *id);

/* Forget id's lease if it is still `lease` (its part committed or was
 * aborted); a part begun again meanwhile has another and keeps it. */
void cpri_leases_drop(cpri_leases *l, const cpr_part_id *id, uint64_t lease);

/* Entries held, for tests and stats. */
uint64_t cpri_leases_count(cpri_leases *l);

#endif /* CPR_CKPTD_LEASES_H */
