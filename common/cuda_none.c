/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA probe when CPR is built without CUDA (CPR_CUDA=OFF or no nvcc). */
#include "cpr/cuda.h"
#include "cpr_common.h"

cpr_status cpr_cuda_device_count(int *count)
{
    *count = 0;
    return CPR_OK;
}

cpr_status cpr_cuda_selftest(int device)
{
    (void)device;
    return cpr_fail(CPR_CUDA, "CPR was built without CUDA");
}

int cpr_cuda_built(void)
{
    return 0;
}

cpr_status cpr_cuda_alloc(int device, size_t bytes, void **out)
{
    (void)device;
    (void)bytes;
    (void)out;
    return cpr_fail(CPR_CUDA, "CPR was built without CUDA");
}

void cpr_cuda_free(void *ptr)
{
    (void)ptr;
}

cpr_status cpr_cuda_copy_to_device(void *dst, const void *src, size_t bytes)
{
    (void)dst;
    (void)src;
    (void)bytes;
    return cpr_fail(CPR_CUDA, "CPR was built without CUDA");
}

cpr_status cpr_cuda_copy_to_host(void *dst, const void *src, size_t bytes)
{
    (void)dst;
    (void)src;
    (void)bytes;
    return cpr_fail(CPR_CUDA, "CPR was built without CUDA");
}

cpr_status cpr_cuda_copy_bandwidth(int device, size_t bytes, double *d2d_gb_s, double *d2h_gb_s)
{
    (void)device;
    (void)bytes;
    (void)d2d_gb_s;
    (void)d2h_gb_s;
    return cpr_fail(CPR_CUDA, "CPR was built without CUDA");
}
