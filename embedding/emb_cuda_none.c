/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA backend when CPR is built without CUDA: creating a CUDA table
 * fails with CPR_CUDA; the other entry points are unreachable. */
#include "cpr_common.h"
#include "emb_internal.h"

int cpri_emb_cuda_built(void) { return 0; }

cpr_status cpri_emb_cuda_create(cpr_emb *t)
{
    (void)t;
    return cpr_fail(CPR_CUDA, "this CPR was built without CUDA (CPR_CUDA=OFF or no nvcc); "
                    "use a CPU table or rebuild with CUDA");
}

#define UNREACHABLE return cpr_fail(CPR_INTERNAL, "CUDA backend not built")
void cpri_emb_cuda_destroy(cpr_emb *t) { (void)t; }
cpr_status cpri_emb_cuda_forward(cpr_emb *t, const int64_t *i, size_t ni, const int64_t *o,
                                size_t nb, cpr_pooling p, float *out)
{ (void)t; (void)i; (void)ni; (void)o; (void)nb; (void)p; (void)out; UNREACHABLE; }
cpr_status cpri_emb_cuda_backward(cpr_emb *t, const int64_t *i, size_t ni, const int64_t *o,
                                 size_t nb, cpr_pooling p, const float *g)
{ (void)t; (void)i; (void)ni; (void)o; (void)nb; (void)p; (void)g; UNREACHABLE; }
cpr_status cpri_emb_cuda_stats(const cpr_emb *t, uint32_t s, cpr_emb_stats *out)
{ (void)t; (void)s; (void)out; UNREACHABLE; }
cpr_status cpri_emb_cuda_select(cpr_emb *t, uint32_t s, cpr_policy p, uint64_t b, uint64_t *ids,
                               size_t cap, size_t *n)
{ (void)t; (void)s; (void)p; (void)b; (void)ids; (void)cap; (void)n; UNREACHABLE; }
cpr_status cpri_emb_cuda_save_begin(cpr_emb *t, cpr_emb_save *save)
{ (void)t; (void)save; UNREACHABLE; }
cpr_status cpri_emb_cuda_copy(cpr_emb *t, const cpr_emb_save *save, size_t first, size_t k,
                             float *v, float *st, int release)
{ (void)t; (void)save; (void)first; (void)k; (void)v; (void)st; (void)release; UNREACHABLE; }
cpr_status cpri_emb_cuda_copy_encoded(cpr_emb *t, const cpr_emb_save *save, size_t first,
                                      size_t k, cpr_codec c, void *v, float *st)
{ (void)t; (void)save; (void)first; (void)k; (void)c; (void)v; (void)st; UNREACHABLE; }
void cpri_emb_cuda_save_end(cpr_emb *t, cpr_emb_save *save, int committed)
{ (void)t; (void)save; (void)committed; }
cpr_status cpri_emb_cuda_apply(cpr_emb *t, const uint64_t *ids, size_t n, const float *v,
                              const float *st)
{ (void)t; (void)ids; (void)n; (void)v; (void)st; UNREACHABLE; }
cpr_status cpri_emb_cuda_wipe_shard(cpr_emb *t, uint32_t s, uint64_t *lost)
{ (void)t; (void)s; (void)lost; UNREACHABLE; }
