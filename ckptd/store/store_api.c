/* SPDX-License-Identifier: Apache-2.0 */
/* The store's function table for the client's local:// (common/cpr_store_api.h). */
#include "cpr_common.h"
#include "cpr_store_api.h"

/* This library's own message buffer, whichever cpr_errmsg the program's
 * other libraries export (the shared library is linked -Bsymbolic). */
static const char *store_errmsg(void)
{
    return cpr_errmsg();
}

static const cpri_store_api api = {
    .abi = CPR_STORE_API_ABI,
    .open = cpr_store_open,
    .close = cpr_store_close,
    .begin = cpr_store_begin,
    .put_rows = cpr_store_put_rows,
    .put_block = cpr_store_put_block,
    .put_blob = cpr_store_put_blob,
    .commit = cpr_store_commit,
    .commit_blobs = cpr_store_commit_blobs,
    .abort = cpr_store_abort,
    .list = cpr_store_list,
    .list_jobs = cpr_store_list_jobs,
    .restore = cpr_store_restore,
    .read_blob = cpr_store_read_blob,
    .stats_get = cpr_store_stats_get,
    .verify = cpr_store_verify,
    .gc = cpr_store_gc,
    .gc_floor = cpr_store_gc_floor,
    .recovery_get = cpr_store_recovery_get,
    .recovery_put = cpr_store_recovery_put,
    .errmsg = store_errmsg,
    .part_location = cpr_store_part_location,
    .reader_open = cpr_store_reader_open,
    .reader_id = cpr_store_reader_id,
    .reader_restore = cpr_store_reader_restore,
    .writer_create = cpr_store_writer_create,
    .writer_block = cpr_store_writer_block,
    .writer_finish = cpr_store_writer_finish,
    .writer_discard = cpr_store_writer_discard,
    .restore_versions = cpr_store_restore_versions,
    .gc_floor_cut = cpr_store_gc_floor_cut,
    .reader_close = cpr_store_reader_close,
};

const cpri_store_api *cpri_store_api_get(void)
{
    return &api;
}
