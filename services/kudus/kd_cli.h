/*  kd_cli: the subcommands of the kudus command-line tool.
*/
#ifndef KD_CLI_H_INCLUDED
#define KD_CLI_H_INCLUDED
#include "kd_internal.h"

//  kudus local: a whole cluster as child processes on loopback.
int
    kd_local_main (int argc, char **argv);

//  kudus run -- COMMAND: a local cluster whose workers are copies of a
//  user's command (kd_run.c).
int
    kd_run_main (int argc, char **argv);

//  kudus experiment FILE: every run of a scenario file (kd_experiment.c).
int
    kd_experiment_main (int argc, char **argv);

//  kudus tail ENDPOINT: follow the monitor's stream.
int
    kd_tail_main (int argc, char **argv);

//  kudus dashboard: a live page of the monitor's stream (kd_dashboard.c).
int
    kd_dashboard_main (int argc, char **argv);

//  kudus linkd: link delay in user space for --netns (kd_linkd.c).
int
    kd_linkd_main (int argc, char **argv);

//  kudus keygen DIR: the CURVE keys of a cluster.
int
    kd_keygen_main (int argc, char **argv);

//  kudus gen-ctr OUT: a synthetic click log (kd_genctr.c).
int
    kd_genctr_main (int argc, char **argv);

//  kudus export: a model to .pt or .npz, through the Python package's
//  writer (kd_export.c).
int
    kd_export_main (int argc, char **argv);

#endif
