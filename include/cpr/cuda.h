/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/cuda.h - the CUDA device probe: how many devices this process can use, and a self-test
 * that runs a kernel and a host<->device round trip on one of them. GPU
 * tests call cpr_cuda_device_count() and exit 77 (skipped) when it is 0.
 * Built from cuda_device.cu when nvcc is available, else from cuda_none.c.
 */
#ifndef CPR_CUDA_H
#define CPR_CUDA_H

#include <stddef.h>

#include "cpr/export.h"
#include "cpr/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Devices visible to this process; 0 (and CPR_OK) without driver or GPU. */
CPR_API cpr_status cpr_cuda_device_count(int *count);
/* Launch a kernel on `device`, copy the result back, check it. */
CPR_API cpr_status cpr_cuda_selftest(int device);
/* 1 if the CUDA sources were compiled into this build. */
CPR_API int cpr_cuda_built(void);

/* Device memory for tools and tests (the CUDA runtime stays in .cu files).
 * cpr_cuda_free(NULL) is a no-op. */
CPR_API cpr_status cpr_cuda_alloc(int device, size_t bytes, void **out);
CPR_API void cpr_cuda_free(void *ptr);
CPR_API cpr_status cpr_cuda_copy_to_device(void *dst, const void *src, size_t bytes);
/* Device to host (synchronous): what a trainer needs to bring a GPU table's
 * forward output back to its CPU MLPs. */
CPR_API cpr_status cpr_cuda_copy_to_host(void *dst, const void *src, size_t bytes);

/* Best-of-5 bandwidth in GB/s of a `bytes` device-to-device copy and of a
 * device-to-pinned-host copy on `device`: the limits the GPU embedding
 * benchmark compares with. */
CPR_API cpr_status cpr_cuda_copy_bandwidth(int device, size_t bytes, double *d2d_gb_s,
                                   double *d2h_gb_s);

#ifdef __cplusplus
}
#endif
#endif /* CPR_CUDA_H */
