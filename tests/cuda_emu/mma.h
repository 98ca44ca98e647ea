/* mma.h — the emulator's stand-in for CUDA's <mma.h> (see cuda_emu.h). */
#include "cuda_emu.h"
