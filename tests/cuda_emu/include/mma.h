/* mma.h — the emulator's nvcuda::wmma (see ../cuda_emu.h). */
#include "cuda_emu.h"
