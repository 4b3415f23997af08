/*  kd_shard: a parameter shard.  Holds one key range of the model, stages
    pushed gradients, applies the scheduler's commits, answers pulls.
*/
#ifndef KD_SHARD_H_INCLUDED
#define KD_SHARD_H_INCLUDED
#include "kd_internal.h"

//  Run the shard until STOP or a signal.  Returns the process exit code.
int
    kd_shard_run (kd_config_t *config, zsock_t *pipe);

#endif
