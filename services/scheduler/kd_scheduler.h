/*  kd_scheduler: membership, key ranges, heartbeats, and the consistency
    controller's decisions turned into COMMIT and RELEASE messages.
*/
#ifndef KD_SCHEDULER_H_INCLUDED
#define KD_SCHEDULER_H_INCLUDED
#include "kudus.h"

//  Run the scheduler until training ends or a signal.  Returns the exit code.
int
    kd_scheduler_run (kd_config_t *config);

#endif
