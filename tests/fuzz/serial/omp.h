/*
 * serial/omp.h — the OpenMP runtime calls of kernels/cpu for the fuzz build,
 * which compiles without OpenMP (tests/fuzz/CMakeLists.txt): one thread, so
 * every kernel runs serially and a fuzz run is reproducible. Not a general
 * OpenMP replacement: only the calls the kernels make.
 */
#ifndef TESSERA_FUZZ_SERIAL_OMP_H
#define TESSERA_FUZZ_SERIAL_OMP_H

static inline int omp_get_max_threads(void) {
    return 1;
}
static inline int omp_get_num_threads(void) {
    return 1;
}
static inline int omp_get_thread_num(void) {
    return 0;
}
static inline int omp_in_parallel(void) {
    return 0;
}
static inline void omp_set_num_threads(int n) {
    (void)n;
}

#endif /* TESSERA_FUZZ_SERIAL_OMP_H */
