/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Part incarnations, for a service that hands parts to writers (ckptd's
 * leases, ckptd/leases.h L5).
 *
 *  S9. Every Begin's open part has an incarnation, unique in the store's
 *      life and never 0. While a thread's fence is set to one, the store
 *      calls that thread makes (put_rows, put_block, put_blob, commit,
 *      abort, direct_segment, put_segment) find an open part of the id only
 *      if it is that incarnation: a part aborted and begun again (by the
 *      idle reaper and another writer) between a writer's lease check and
 *      its call is "not open" to the old writer, never written by it. The
 *      check and the use happen under one hold of the store's lock
 *      (cpri_open_part_get), so there is no window left between them.
 */
#ifndef CPR_STORE_PART_FENCE_H
#define CPR_STORE_PART_FENCE_H

#include <stdint.h>

#include "cpr/store.h"

/* cpr_store_begin, and the begun part's incarnation in *incarnation (may
 * be NULL). */
cpr_status cpri_store_begin_incarnation(cpr_store *store, const cpr_part_spec *spec,
                                        uint64_t *incarnation);

/* The incarnation of open part `id`; 0 if it is not open. */
uint64_t cpri_store_part_incarnation(cpr_store *store, const cpr_part_id *id);

/* This thread's store calls act only on the open part of `incarnation`
 * (0: on whichever is open) until the fence is set again. */
void cpri_store_fence(uint64_t incarnation);

#endif /* CPR_STORE_PART_FENCE_H */
