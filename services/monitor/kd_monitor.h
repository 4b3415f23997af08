/*  kd_monitor: telemetry intake, test-set evaluation and the live stream.
*/
#ifndef KD_MONITOR_H_INCLUDED
#define KD_MONITOR_H_INCLUDED
#include "kd_internal.h"

//  Run the monitor until STOP or a signal.  Returns the exit code.
int
    kd_monitor_run (kd_config_t *config, zsock_t *pipe);

#endif
