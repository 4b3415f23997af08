/*  kd_worker: a training worker.  Computes minibatch gradients on its data
    partition, pushes them to the shards, meets the consistency barrier at the
    scheduler, pulls the new model, and reports telemetry to the monitor.
*/
#ifndef KD_WORKER_H_INCLUDED
#define KD_WORKER_H_INCLUDED
#include "kd_internal.h"

//  Run the worker until STOP, a signal or a fatal error.  Returns the exit
//  code.
int
    kd_worker_run (kd_config_t *config, zsock_t *pipe);

//  Speed factor of a rank in heterogeneity period k under --hetero dynamic:
//  a seeded subset of the workers changes speed every period.  Pure, so every
//  worker and the tests compute the same schedule without coordination.
double
    kd_worker_hetero_factor (uint64_t seed, uint64_t rank, uint64_t period);

#endif
