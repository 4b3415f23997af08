/*  kd_service: a Kudus service, run as an actor, and the shared main () of
    every service executable.

    A service is a function that sets itself up, then serves until it is
    done, is interrupted, or reads "$TERM" from its pipe.  The pipe works as
    CZMQ's zactor's does, but the thread is our own (a pthread joined on
    destroy) and set-up reports READY or FAILED with the exit code, so a
    failed bind is an error to the caller instead of a thread left running.
    kd_service_new runs one in a thread of this process with its own CURVE
    keys and log name (the log level is process-wide), so that a test can
    run a whole cluster in one process; kd_service_main is what each executable's main () calls:
    it reads flags and KUDUS_* variables into the config table, starts the
    one actor, and waits for it.  Exit codes: the service's, or 2 for a bad
    setting.
*/
#ifndef KD_SERVICE_H_INCLUDED
#define KD_SERVICE_H_INCLUDED

#include "kd_config.h"
#include <czmq.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Set up, call kd_service_ready (pipe), serve; return the exit code.
//  pipe is the actor's (never NULL when started by kd_service_new).
typedef int (kd_service_fn) (kd_config_t *config, zsock_t *pipe);

typedef struct _kd_service_t kd_service_t;

//  Run service (KD_SVC_*) as an actor logging as log_name, and return once
//  it is set up (its sockets bound).  config must outlive the actor.  On a
//  failed set-up returns NULL with the reason in the log and the service's
//  exit code in *rc_p (when not NULL).
kd_service_t *
    kd_service_new (unsigned service, const char *log_name, kd_service_fn *run,
                    kd_config_t *config, int *rc_p);

//  Stop the actor if it still runs ("$TERM"), wait for it, and null the
//  caller's pointer.  Returns the service's exit code.
int
    kd_service_destroy (kd_service_t **self_p);

//  Wait until the actor ends by itself (its run is over) or timeout_ms
//  passes (-1: no limit) or the process is interrupted.  Returns true when
//  it ended.
bool
    kd_service_wait (kd_service_t *self, int timeout_ms);

//  Called by a service when its set-up is done: kd_service_new returns.
//  Safe to call more than once.
void
    kd_service_ready (zsock_t *pipe);

int
    kd_service_main (int argc, char **argv, unsigned service,
                     const char *program, const char *log_name,
                     kd_service_fn *run);

#ifdef __cplusplus
}
#endif

#endif
