/*  kd_service: the shared main () of every Kudus service.
*/
#include "kd_service.h"
#include "kd_curve.h"
#include "kd_log.h"
#include <czmq.h>
#include <signal.h>

int
kd_service_main (int argc, char **argv, unsigned service, const char *program,
                 const char *log_name, kd_service_fn *run)
{
    int rc = 0;
    kd_config_t *config = kd_config_from_args (service, program, program, argc, argv, &rc);
    if (!config)
        return rc;
    kd_log_init (log_name, kd_log_level_parse (kd_config_str (config, "log-level")));
    //  libzmq 4.3.3 fixed the known CVEs in the CURVE path; refuse older.
    int major, minor, patch;
    zmq_version (&major, &minor, &patch);
    if (major * 10000 + minor * 100 + patch < 40303) {
        kd_error ("libzmq %d.%d.%d is older than 4.3.3; refusing to start", major, minor, patch);
        kd_config_destroy (&config);
        return 1;
    }
    zsys_init ();
    zsys_set_logstream (stderr);
    //  CURVE keys are checked, and the ZAP handler runs, before the service
    //  binds anything; a worker only connects, so it needs no server key.
    char err [512];
    int roles = service == KD_SVC_WORKER ? KD_CURVE_CLIENT : KD_CURVE_SERVER | KD_CURVE_CLIENT;
    //  The client key is the service's own: its role is what peers see.
    //  A barrier aggregator is part of the scheduler: it has its key.
    kd_curve_set_identity (service == KD_SVC_SCHEDULER || service == KD_SVC_AGGREGATOR ? "scheduler"
                         : service == KD_SVC_SHARD ? "shard"
                         : service == KD_SVC_MONITOR ? "monitor"
                         : service == KD_SVC_WORKER && kd_config_bool (config, "evaluator") ? "evaluator"
                         : "worker");
    kd_curve_t *curve = kd_curve_new (config, roles, err, sizeof err);
    if (!curve || kd_curve_start_auth (curve)) {
        kd_error ("%s; refusing to start", curve ? "curve: cannot start the ZAP handler" : err);
        kd_curve_destroy (&curve);
        kd_config_destroy (&config);
        return 1;
    }
    kd_curve_set_process (curve);
    rc = run (config);
    kd_curve_destroy (&curve);
    kd_config_destroy (&config);
    //  A STOP from the scheduler and a SIGTERM from an orchestrator often
    //  come together.  CZMQ's exit handler puts the default SIGTERM action
    //  back, so a signal landing during the rest of the exit would turn a
    //  clean exit into death by signal: shut CZMQ down now, then ignore
    //  them.
    zsys_shutdown ();
    signal (SIGTERM, SIG_IGN);
    signal (SIGINT, SIG_IGN);
    return rc;
}
