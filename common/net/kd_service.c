/*  kd_service: a Kudus service as an actor, and the shared main () of every
    service executable (kd_service.h).

    The actor is a thread of our own with a pipe (zsys_create_pipe), not a
    zactor: a zactor's handshakes return early when a signal interrupts
    them, and a service's main thread is the one that takes the signals.
    Here every wait retries, and the end is a join.

    On the pipe the thread says "READY" (kd_service_ready) or "FAILED"
    once, then "END" when its run is over; we say "$TERM".
*/
#include "kd_service.h"
#include "kd_curve.h"
#include "kd_log.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>

//  What the actor's thread needs; owned by kd_service_t.
typedef struct {
    kd_service_fn *run;
    kd_config_t *config;
    kd_curve_t *curve;
    char log_name [64];
    zsock_t *pipe;                      //  the thread's end
    int rc;                             //  the run's exit code, once done
} s_args_t;

struct _kd_service_t {
    pthread_t thread;
    zsock_t *pipe;                      //  our end
    bool ended;                         //  "END" was read
    s_args_t args;
};

//  Whether this thread's service said it is ready (kd_service_ready).
static __thread bool s_ready;

static void *
s_thread (void *arg)
{
    s_args_t *args = (s_args_t *) arg;
    kd_log_set_thread (args->log_name);
    kd_curve_set_thread (args->curve);
    s_ready = false;
    args->rc = args->run (args->config, args->pipe);
    //  A run that ended before it was ready failed its set-up.
    if (!s_ready)
        zstr_send (args->pipe, "FAILED");
    zstr_send (args->pipe, "END");
    kd_curve_set_thread (NULL);
    return NULL;
}

void
kd_service_ready (zsock_t *pipe)
{
    if (pipe && !s_ready) {
        s_ready = true;
        zstr_send (pipe, "READY");
    }
}

//  The next word from the thread, waiting through signals; NULL only when
//  the pipe fails for good.
static char *
s_recv (zsock_t *pipe)
{
    while (true) {
        char *word = zstr_recv (pipe);
        if (word || zmq_errno () != EINTR)
            return word;
    }
}

//  The CURVE keys of one instance of service, loaded and checked before it
//  binds anything, with the ZAP handler started; NULL after logging why.
static kd_curve_t *
s_curve (unsigned service, kd_config_t *config)
{
    char err [512];
    //  A worker only connects, so it needs no server key.
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
        kd_error ("%s; refusing to start", curve ? "curve: cannot start the ZAP handler "
                  "(one per process: two CURVE services cannot share a process)" : err);
        kd_curve_destroy (&curve);
    }
    return curve;
}

kd_service_t *
kd_service_new (unsigned service, const char *log_name, kd_service_fn *run,
                kd_config_t *config, int *rc_p)
{
    assert (run && config);
    if (rc_p)
        *rc_p = 1;
    //  The level is process-wide: the last service started sets it.
    int level = kd_log_level_parse (kd_config_str (config, "log-level"));
    if (level >= 0)
        kd_log_level_current = level;
    kd_curve_t *curve = s_curve (service, config);
    if (!curve)
        return NULL;
    kd_service_t *self = (kd_service_t *) zmalloc (sizeof *self);
    self->args.run = run;
    self->args.config = config;
    self->args.curve = curve;
    snprintf (self->args.log_name, sizeof self->args.log_name, "%s", log_name ? log_name : "kudus");
    self->pipe = zsys_create_pipe (&self->args.pipe);
    assert (self->pipe);
    int err = pthread_create (&self->thread, NULL, s_thread, &self->args);
    if (err) {
        kd_error ("cannot start a thread for %s: %s", self->args.log_name, strerror (err));
        zsock_destroy (&self->pipe);
        zsock_destroy (&self->args.pipe);
        kd_curve_destroy (&self->args.curve);
        free (self);
        return NULL;
    }
    char *word = s_recv (self->pipe);
    bool ready = word && streq (word, "READY");
    zstr_free (&word);
    if (!ready) {
        int rc = kd_service_destroy (&self);
        if (rc_p)
            *rc_p = rc ? rc : 1;
        return NULL;
    }
    if (rc_p)
        *rc_p = 0;
    return self;
}

bool
kd_service_wait (kd_service_t *self, int timeout_ms)
{
    assert (self);
    if (self->ended)
        return true;
    zmq_pollitem_t item = { zsock_resolve (self->pipe), 0, ZMQ_POLLIN, 0 };
    if (zmq_poll (&item, 1, timeout_ms) > 0 && (item.revents & ZMQ_POLLIN)) {
        char *word = s_recv (self->pipe);
        self->ended = !word || streq (word, "END");
        zstr_free (&word);
    }
    return self->ended;
}

int
kd_service_destroy (kd_service_t **self_p)
{
    int rc = 0;
    if (self_p && *self_p) {
        kd_service_t *self = *self_p;
        //  Asked to end unless it did; the join waits through signals.
        if (!kd_service_wait (self, 0))
            zstr_send (self->pipe, "$TERM");
        pthread_join (self->thread, NULL);
        rc = self->args.rc;
        zsock_destroy (&self->pipe);
        zsock_destroy (&self->args.pipe);
        kd_curve_destroy (&self->args.curve);
        free (self);
        *self_p = NULL;
    }
    return rc;
}

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
    kd_service_t *actor = kd_service_new (service, log_name, run, config, &rc);
    if (actor) {
        //  Until the service ends by itself or a signal interrupts the wait
        //  (the service sees zsys_interrupted too).
        while (!kd_service_wait (actor, -1) && !zsys_interrupted)
            ;
        rc = kd_service_destroy (&actor);
    }
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
