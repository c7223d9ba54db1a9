/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA device probe (see cpr_cuda.h). Every runtime call is checked and
 * mapped to CPR_CUDA with the runtime's own message; "no device" and "no
 * driver" are not errors for the count, so CPU-only machines report 0.
 */
#include <cuda_runtime.h>

#include "cpr_common.h"
#include "cpr_cuda.h"

#define CHECK(call)                                                            \
    do {                                                                       \
        cudaError_t err_ = (call);                                             \
        if (err_ != cudaSuccess) {                                             \
            st = cpr_fail(CPR_CUDA, "%s failed: %s", #call,                    \
                          cudaGetErrorString(err_));                           \
            goto out;                                                          \
        }                                                                      \
    } while (0)

__global__ void selftest_kernel(int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = 2 * i + 1;
}

extern "C" cpr_status cpr_cuda_device_count(int *count)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
        cudaGetLastError(); /* clear the sticky error */
        *count = 0;
        return CPR_OK;
    }
    if (err != cudaSuccess)
        return cpr_fail(CPR_CUDA, "cudaGetDeviceCount failed: %s", cudaGetErrorString(err));
    *count = n;
    return CPR_OK;
}

extern "C" cpr_status cpr_cuda_selftest(int device)
{
    const int n = 1 << 16;
    cpr_status st = CPR_OK;
    int *dev = NULL, *host = NULL;
    CHECK(cudaSetDevice(device));
    CHECK(cudaMalloc(&dev, n * sizeof(int)));
    CHECK(cudaMallocHost(&host, n * sizeof(int)));
    selftest_kernel<<<(n + 255) / 256, 256>>>(dev, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(host, dev, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        if (host[i] != 2 * i + 1) {
            st = cpr_fail(CPR_CUDA, "device %d returned %d at %d, expected %d", device,
                          host[i], i, 2 * i + 1);
            goto out;
        }
    }
out:
    if (dev)
        cudaFree(dev);
    if (host)
        cudaFreeHost(host);
    return st;
}

extern "C" int cpr_cuda_built(void)
{
    return 1;
}
