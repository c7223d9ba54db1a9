/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU smoke test: on a machine with a CUDA device, a kernel launch and a
 * device-to-host copy must give exact results. Without a device (CI, the
 * development machines) it exits 77, which ctest reports as skipped.
 */
#include <stdio.h>

#include "cpr/cuda.h"

int main(void)
{
    int count = -1;
    cpr_status st = cpr_cuda_device_count(&count);
    if (st != CPR_OK) {
        fprintf(stderr, "device query failed: %s\n", cpr_errmsg());
        return 1;
    }
    if (count == 0) {
        printf("no CUDA device (CUDA sources built: %s): skipped\n",
               cpr_cuda_built() ? "yes" : "no");
        return 77;
    }
    for (int d = 0; d < count; d++) {
        st = cpr_cuda_selftest(d);
        if (st != CPR_OK) {
            fprintf(stderr, "device %d: %s\n", d, cpr_errmsg());
            return 1;
        }
    }
    printf("%d CUDA device(s) passed the self-test\n", count);
    return 0;
}
