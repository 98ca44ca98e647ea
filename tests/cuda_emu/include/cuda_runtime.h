/*
 * cuda_runtime.h — the emulator's CUDA runtime for C++ sources (see
 * cuda_runtime_api.h and ../cuda_emu.h): adds dim3 and the templated
 * cudaFuncSetAttribute, and the device-side emulation.
 */
#ifndef TESSERA_EMU_CUDA_RUNTIME_H
#define TESSERA_EMU_CUDA_RUNTIME_H

#include "cuda_runtime_api.h"
#include "cuda_emu.h"

template <class F>
static inline cudaError_t cudaFuncSetAttribute(F *func, cudaFuncAttribute attr, int value) {
    return emu_func_set_attribute((const void *)func, attr, value);
}

#endif /* TESSERA_EMU_CUDA_RUNTIME_H */
