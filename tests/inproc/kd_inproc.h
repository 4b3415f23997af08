/*  kd_inproc: the fixture of the in-process suites.  A service runs as an
    actor of the test's own process, started from the flags its executable
    would take, and is stopped through its pipe; the services' log lines
    can be sent to a file, as a spawned service's are.
*/
#ifndef KD_INPROC_H_INCLUDED
#define KD_INPROC_H_INCLUDED

#include <stdbool.h>
#include "kd_config.h"
#include "kd_service.h"

//  One service: its settings (which must outlive the actor) and its actor.
typedef struct {
    kd_config_t *config;
    kd_service_t *actor;
} kd_inproc_t;

//  Start service (KD_SVC_SCHEDULER, _SHARD, _MONITOR, _WORKER or
//  _AGGREGATOR) logging as name, with flags (NULL-terminated, at most 60).  A bad flag or a
//  failed set-up fails the test.
kd_inproc_t
    kd_inproc_start (unsigned service, const char *name, const char *const *flags);

//  Stop it ("$TERM" if it still runs), free its settings, and return its
//  exit code; a service never started gives 0.
int
    kd_inproc_stop (kd_inproc_t *svc);

//  True once the shard at endpoint serves a pull (it is registered with
//  its scheduler; before, it answers 503), within 100 tries 100 ms apart
//  (each waits up to 3 s for its answer).
bool
    kd_inproc_shard_serves (const char *endpoint);

//  Send this process's log lines (stderr) to path, appended, so that a
//  test can count them with kd_test_count.  Returns false if it cannot.
bool
    kd_inproc_log_to (const char *path);

//  The fixture of a suite, one per test process (Criterion runs each test
//  in a process of its own): a scratch folder (removed when the test
//  ends), a reserved base port, the file its services log to, and the
//  services it started.  kd_inproc_setup and kd_inproc_teardown are a
//  suite's .init and .fini, or are called from them.
void
    kd_inproc_setup (void);

//  Stop every service kd_inproc_run started, the last first, and give
//  the test its stderr back.
void
    kd_inproc_teardown (void);

//  Stop every service kd_inproc_run started, the last first: a test that
//  runs clusters one after another.
void
    kd_inproc_stop_all (void);

//  Print the end of the services' log to the test's own stderr (a
//  failing test's evidence: the scratch folder goes when the test ends).
void
    kd_inproc_dump_log (void);

//  Start a service as kd_inproc_start does; teardown stops it.
kd_inproc_t *
    kd_inproc_run (unsigned service, const char *name, const char *const *flags);

//  The fixture's base port, scratch folder and log file.
int
    kd_inproc_port (void);
const char *
    kd_inproc_dir (void);
const char *
    kd_inproc_log (void);

#endif
