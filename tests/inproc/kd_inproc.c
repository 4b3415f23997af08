/*  kd_inproc: the fixture of the in-process suites (see kd_inproc.h).
*/
#include <criterion/criterion.h>
#include <fcntl.h>
#include <unistd.h>
#include "kd_inproc.h"
#include "kd_testutil.h"
#include "kd_scheduler.h"
#include "kd_shard.h"
#include "kd_monitor.h"
#include "kd_worker.h"
#include "kd_aggregator.h"

kd_inproc_t
kd_inproc_start (unsigned service, const char *name, const char *const *flags)
{
    kd_service_fn *run = service == KD_SVC_SCHEDULER ? kd_scheduler_run
                       : service == KD_SVC_SHARD ? kd_shard_run
                       : service == KD_SVC_MONITOR ? kd_monitor_run
                       : service == KD_SVC_WORKER ? kd_worker_run
                       : service == KD_SVC_AGGREGATOR ? kd_aggregator_run : NULL;
    cr_assert (run, "%s: no such service (%u)", name, service);
    const char *argv [64] = { name };
    int argc = 1;
    while (*flags && argc < 61)
        argv [argc++] = *flags++;
    cr_assert_null (*flags, "%s: more than 60 flags", name);
    argv [argc] = NULL;
    int rc = 0;
    kd_inproc_t svc = { NULL, NULL };
    svc.config = kd_config_from_args (service, name, name, argc, (char **) argv, &rc);
    cr_assert (svc.config, "%s: bad flags (exit %d)", name, rc);
    svc.actor = kd_service_new (service, name, run, svc.config, &rc);
    cr_assert (svc.actor, "%s: set-up failed (exit %d)", name, rc);
    return svc;
}

int
kd_inproc_stop (kd_inproc_t *svc)
{
    int rc = svc->actor ? kd_service_destroy (&svc->actor) : 0;
    kd_config_destroy (&svc->config);
    return rc;
}

bool
kd_inproc_shard_serves (const char *endpoint)
{
    //  One connection for every attempt, so that the shard's connection
    //  counters show one probe, not a hundred.
    zsock_t *client = kd_test_dealer (endpoint);
    bool ok = false;
    for (int i = 0; client && i < 100 && !ok; i++) {
        kd_msg_t *req = kd_msg_new (KD_MSG_PULL);
        kd_msg_set_uint (req, KD_F_VERSION, 0);
        kd_msg_send (&req, client);
        kd_msg_t *reply = kd_test_recv (client);
        ok = reply && kd_msg_type (reply) == KD_MSG_PULL_OK;
        kd_msg_destroy (&reply);
        if (!ok)
            zclock_sleep (100);
    }
    zsock_destroy (&client);
    return ok;
}

//  The test's own stderr while the services' lines go to a file.
static int s_stderr = -1;

bool
kd_inproc_log_to (const char *path)
{
    int fd = open (path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return false;
    fflush (stderr);
    if (s_stderr < 0)
        s_stderr = fcntl (STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    bool ok = dup2 (fd, STDERR_FILENO) == STDERR_FILENO;
    close (fd);
    return ok;
}

//  Give the test its stderr back: what a sanitizer says at exit is seen.
static void
s_log_restore (void)
{
    if (s_stderr < 0)
        return;
    fflush (stderr);
    dup2 (s_stderr, STDERR_FILENO);
    close (s_stderr);
    s_stderr = -1;
}

//  The fixture of this test process.
#define S_SERVICES 8
static struct {
    char *dir;
    int port;
    char log [256];
    kd_inproc_t svc [S_SERVICES];
    int count;
} s_fixture;

void
kd_inproc_setup (void)
{
    memset (&s_fixture, 0, sizeof s_fixture);
    s_fixture.dir = kd_test_tmpdir ();
    cr_assert (s_fixture.dir, "no scratch folder");
    s_fixture.port = kd_test_base_port ();
    snprintf (s_fixture.log, sizeof s_fixture.log, "%s/services.log", s_fixture.dir);
    cr_assert (kd_inproc_log_to (s_fixture.log), "cannot log to %s", s_fixture.log);
}

void
kd_inproc_stop_all (void)
{
    //  Shards before their scheduler, as a cluster stops.
    while (s_fixture.count > 0)
        kd_inproc_stop (&s_fixture.svc [--s_fixture.count]);
}

void
kd_inproc_dump_log (void)
{
    int out = s_stderr >= 0 ? s_stderr : STDERR_FILENO;
    char *text = kd_test_slurp (s_fixture.log);
    size_t len = text ? strlen (text) : 0, from = len > 8000 ? len - 8000 : 0;
    dprintf (out, "---- the services' log, %s (last %zu bytes) ----\n%s\n----\n", s_fixture.log,
             len - from, text ? text + from : "(none)");
    free (text);
}

void
kd_inproc_teardown (void)
{
    kd_inproc_stop_all ();
    s_log_restore ();
    free (s_fixture.dir);
    s_fixture.dir = NULL;
}

kd_inproc_t *
kd_inproc_run (unsigned service, const char *name, const char *const *flags)
{
    cr_assert (s_fixture.count < S_SERVICES, "more than %d services", S_SERVICES);
    s_fixture.svc [s_fixture.count] = kd_inproc_start (service, name, flags);
    return &s_fixture.svc [s_fixture.count++];
}

int
kd_inproc_port (void)
{
    return s_fixture.port;
}

const char *
kd_inproc_dir (void)
{
    return s_fixture.dir;
}

const char *
kd_inproc_log (void)
{
    return s_fixture.log;
}
