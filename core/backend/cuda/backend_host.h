/*
 * backend_host.h — the backend's end of the host table (backend_abi.h):
 * attach keeps the core's table, and backend_host.c defines the core
 * functions the backend's sources call (ts_error, ts_comm_split, ...) as
 * forwarders through it, so that the backend's files, compiled unchanged
 * for the core's tests, link into tessera-backend-cuda.so against nothing
 * of tessera's.
 *
 * Only for a backend shared object; never compiled into the core (it would
 * define ts_error twice).
 */
#ifndef TESSERA_CORE_BACKEND_HOST_H
#define TESSERA_CORE_BACKEND_HOST_H

#include "backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The descriptor's attach: keeps `host` for the process's life.
 * Failure: TS_ERR_PLUGIN when `host` is NULL, of another ABI major, or
 * smaller than ABI 1.0's table (the message says which; it is set with
 * the host's own error function when there is one). */
ts_status ts_backend_host_attach(const ts_backend_host *host);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_BACKEND_HOST_H */
