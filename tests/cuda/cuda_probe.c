/*
 * cuda_probe.c — tessera_cuda_probe: whether this process sees a CUDA device,
 * for test scripts that need one. Prints the count and exits 0, or prints
 * "SKIPPED: no CUDA device" and exits 77 (ctest's skip code here), also in a
 * build without CUDA (ts_device_count() is 0 there).
 */
#include <stdio.h>

#include "tessera/device.h"

int main(void) {
    int n = ts_device_count();
    if (n < 1) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    printf("%d CUDA device%s\n", n, n == 1 ? "" : "s");
    return 0;
}
