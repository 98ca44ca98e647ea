/*
 * cuda_probe.c — tessera_cuda_probe [N]: whether this process sees at least
 * N CUDA devices (default 1), for test scripts that need them. Prints the
 * count and exits 0, or prints "SKIPPED: ..." and exits 77 (ctest's skip
 * code here), also in a build without CUDA (ts_device_count() loads the CUDA
 * backend to ask, and is 0 when there is none to load).
 */
#include <stdio.h>
#include <stdlib.h>

#include "tessera/device.h"

int main(int argc, char **argv) {
    int want = argc > 1 ? atoi(argv[1]) : 1;
    int n = ts_device_count();
    if (n < 1) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    if (n < want) {
        printf("SKIPPED: %d CUDA device%s, %d needed\n", n, n == 1 ? "" : "s", want);
        return 77;
    }
    printf("%d CUDA device%s\n", n, n == 1 ? "" : "s");
    return 0;
}
