/* cuda_bf16.h — the emulator's __nv_bfloat16 (see ../cuda_emu.h). */
#include "cuda_emu.h"
