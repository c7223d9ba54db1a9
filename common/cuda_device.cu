/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA device probe (see cpr/cuda.h). Every runtime call is checked and
 * mapped to CPR_CUDA with the runtime's own message; "no device" and "no
 * driver" are not errors for the count, so CPU-only machines report 0.
 */
#include <cuda_runtime.h>

#include "cpr_common.h"
#include "cpr/cuda.h"

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

extern "C" cpr_status cpr_cuda_alloc(int device, size_t bytes, void **out)
{
    cpr_status st = CPR_OK;
    void *p = NULL;
    CHECK(cudaSetDevice(device));
    CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    *out = p;
out:
    return st;
}

extern "C" void cpr_cuda_free(void *ptr)
{
    if (ptr)
        cudaFree(ptr);
}

extern "C" cpr_status cpr_cuda_copy_to_device(void *dst, const void *src, size_t bytes)
{
    cpr_status st = CPR_OK;
    CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
out:
    return st;
}

extern "C" cpr_status cpr_cuda_copy_to_host(void *dst, const void *src, size_t bytes)
{
    cpr_status st = CPR_OK;
    CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
out:
    return st;
}

/* Best of 5 timed copies of `bytes` from src to dst, in GB/s. */
static cpr_status time_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            double *gb_s)
{
    cpr_status st = CPR_OK;
    cudaEvent_t start = NULL, stop = NULL;
    float best_ms = 0;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < 5; i++) {
        float ms = 0;
        CHECK(cudaEventRecord(start));
        CHECK(cudaMemcpyAsync(dst, src, bytes, kind));
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (i == 0 || ms < best_ms)
            best_ms = ms;
    }
    *gb_s = (double)bytes / (best_ms * 1e-3) / 1e9;
out:
    if (start)
        cudaEventDestroy(start);
    if (stop)
        cudaEventDestroy(stop);
    return st;
}

extern "C" cpr_status cpr_cuda_copy_bandwidth(int device, size_t bytes, double *d2d_gb_s,
                                              double *d2h_gb_s)
{
    cpr_status st = CPR_OK;
    void *a = NULL, *b = NULL, *host = NULL;
    CHECK(cudaSetDevice(device));
    CHECK(cudaMalloc(&a, bytes));
    CHECK(cudaMalloc(&b, bytes));
    CHECK(cudaMallocHost(&host, bytes));
    CHECK(cudaMemset(a, 1, bytes));
    st = time_copy(b, a, bytes, cudaMemcpyDeviceToDevice, d2d_gb_s);
    if (st == CPR_OK)
        st = time_copy(host, a, bytes, cudaMemcpyDeviceToHost, d2h_gb_s);
out:
    if (a)
        cudaFree(a);
    if (b)
        cudaFree(b);
    if (host)
        cudaFreeHost(host);
    return st;
}
