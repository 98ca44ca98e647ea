/*
 * test_dispatch_setup.h — what the dispatcher tests (test_dispatch.c,
 * test_dispatch_parity.c) start with: MPI, the INI file argv[1] that loads
 * the dispatchers' plugins, validated, and the CPU as the plugins' device.
 */
#ifndef TESSERA_TEST_DISPATCH_SETUP_H
#define TESSERA_TEST_DISPATCH_SETUP_H

#include <stdio.h>

#include "backend.h"
#include "config.h"
#include "plugin.h"
#include "tessera/comm.h"

/* 0 on success; else prints "PROG: <error>" and returns 1. */
static int dispatch_setup(int *argc, char ***argv, const char *prog, ts_comm **world,
                          ts_config **cfg, ts_plugins **reg) {
    int n = 0;
    const ts_key_spec *core = ts_config_core_keys(&n);
    if (ts_comm_world_init(argc, argv, 60.0, world) || ts_config_create(cfg) ||
        ts_config_register(*cfg, core, n) || ts_config_load(*cfg, (*argv)[1]) ||
        ts_plugins_create(reg) || ts_plugins_load(*reg, *cfg)) {
        fprintf(stderr, "%s: %s\n", prog, ts_last_error());
        return 1;
    }
    ts_plugins_set_device(*reg, ts_backend_cpu());
    return 0;
}

#endif /* TESSERA_TEST_DISPATCH_SETUP_H */
