/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA probe when CPR is built without CUDA (CPR_CUDA=OFF or no nvcc). */
#include "cpr_cuda.h"
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
