/*
 * threads.c — one knob for the CPU kernels' parallelism: the OpenMP team
 * size, which the OpenMP build of OpenBLAS shares.
 */
#include <cblas.h>
#include <omp.h>

#include "cpu_kernels.h"

/* OpenBLAS's own setter; declared here because not every cblas.h has it. */
void openblas_set_num_threads(int num_threads);

void ts_cpu_set_threads(int n) {
    if (n <= 0) return;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int ts_cpu_get_threads(void) {
    return omp_get_max_threads();
}
