/* cuda_bf16.h — the emulator's stand-in for CUDA's <cuda_bf16.h> (see cuda_emu.h). */
#include "cuda_emu.h"
