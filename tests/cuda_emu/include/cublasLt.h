/* cublasLt.h — the emulator's cuBLASLt: a handle, nothing computed with it. */
#ifndef TESSERA_EMU_CUBLASLT_H
#define TESSERA_EMU_CUBLASLT_H

#include "cublas_v2.h"

#ifdef __cplusplus
extern "C" {
#endif
typedef struct cublasLtContext *cublasLtHandle_t;
cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
#ifdef __cplusplus
}
#endif
#endif /* TESSERA_EMU_CUBLASLT_H */
