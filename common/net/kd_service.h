/*  kd_service: the shared main () of every Kudus service.

    It reads flags and KUDUS_* variables into the config table, sets the log
    identity, lets CZMQ catch SIGINT and SIGTERM (zsys_interrupted), runs
    the service loop, and tears down.  Exit codes: the loop's, or 2 for a
    bad setting.
*/
#ifndef KD_SERVICE_H_INCLUDED
#define KD_SERVICE_H_INCLUDED

#include "kd_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int (kd_service_fn) (kd_config_t *config);

int
    kd_service_main (int argc, char **argv, unsigned service,
                     const char *program, const char *log_name,
                     kd_service_fn *run);

#ifdef __cplusplus
}
#endif

#endif
