/*  kd_scheduler: membership, key ranges, heartbeats, and the consistency
    controller's decisions turned into COMMIT and RELEASE messages.
*/
#ifndef KD_SCHEDULER_H_INCLUDED
#define KD_SCHEDULER_H_INCLUDED
#include "kd_internal.h"

//  The run's optimizer as a kd_optimizer spec, from the settings
//  optimizer, lr, momentum, beta1, beta2, eps, weight-decay, lr-schedule and
//  warmup-steps.  Returns 0, or -1 with the setting at fault in err.
int
    kd_scheduler_optimizer (kd_config_t *config, char *spec, size_t spec_size,
                            char *err, size_t err_size);

//  Run the scheduler until training ends or a signal.  Returns the exit code.
int
    kd_scheduler_run (kd_config_t *config, zsock_t *pipe);

#endif
