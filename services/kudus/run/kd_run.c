/*  kd_run: `kudus run [SETTINGS] -- COMMAND [ARGS]` launches a user's
    training program as torchrun does.

    It starts a local cluster (kudus local, with every setting given, the
    model external unless one is named) whose workers are N copies of
    COMMAND, N being the workers setting.  Each copy finds the cluster in
    its environment: KUDUS_SCHEDULER, KUDUS_MONITOR (the monitor's
    intake), KUDUS_RANK (0 .. N-1) and KUDUS_WORKERS (N).  kudus.torch.Worker
    reads them when it is given no endpoint, and kudus-worker reads every
    setting from KUDUS_* anyway.  When the run ends kudus local prints the
    summary; the copies get STOP from the scheduler, and whatever outlives
    the run by S_GRACE_MS is stopped.  The exit code is kudus local's, or
    1 when a copy failed.
*/
#include "kd_spawn.h"
#include "kd_cli.h"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_GRACE_MS      15000   //  one side ended: how long the other may take
#define S_POLL_MS       100     //  how often exits and signals are looked at
#define S_MAX_COPIES    256     //  the workers setting's bound

static volatile sig_atomic_t s_signal = 0;

static void
s_on_signal (int sig)
{
    s_signal = sig;
}

static void
s_usage (FILE *out)
{
    fprintf (out,
        "usage: kudus run [--setting VALUE ...] -- COMMAND [ARGS ...]\n\n"
        "Starts a local cluster (the settings are kudus local's; the model is external unless\n"
        "--model names one) and --workers copies of COMMAND as its workers, each with\n"
        "KUDUS_SCHEDULER, KUDUS_MONITOR, KUDUS_RANK and KUDUS_WORKERS set; stops them all\n"
        "when the run ends and prints the summary.  'kudus local --help' lists the settings.\n");
}

//  In the child before exec: the copy's variables, and the default
//  signal dispositions a user's program expects.
static int
s_child_env (void *arg)
{
    char **env = (char **) arg;
    for (size_t i = 0; env && env [i]; i++)
        putenv (env [i]);
    signal (SIGINT, SIG_DFL);
    signal (SIGTERM, SIG_DFL);
    return 0;
}

//  Start argv, looked up in PATH, with `env` (NAME=VALUE strings,
//  NULL-ended, or NULL) added to our environment; it gets SIGTERM if we
//  die.  Returns the pid, or -1.
static pid_t
s_spawn (char **argv, char **env)
{
    kd_spawn_t how = KD_SPAWN_INIT;
    how.argv = (const char *const *) argv;
    how.search = true;
    how.death_signal = SIGTERM;
    how.before_exec = s_child_env;
    how.arg = env;
    return kd_spawn (&how);
}

int
kd_run_main (int argc, char **argv)
{
    int sep = -1;
    for (int i = 1; i < argc && sep < 0; i++)
        if (!strcmp (argv [i], "--"))
            sep = i;
    if (sep < 0 || sep == argc - 1) {
        bool help = sep < 0 && argc > 1 && (!strcmp (argv [1], "--help") || !strcmp (argv [1], "-h"));
        s_usage (help ? stdout : stderr);
        return help ? 0 : 2;
    }
    //  The settings are kudus local's: checked now, so that a mistake is
    //  named before anything starts.
    int rc = 0;
    kd_config_t *c = kd_config_from_args (KD_SVC_LOCAL, "kudus run", "kudus run", sep, argv, &rc);
    if (!c)
        return rc;
    int copies = (int) kd_config_int (c, "workers");
    int port = (int) kd_config_int (c, "base-port");
    bool model_named = kd_config_is_set (c, "model");
    kd_config_destroy (&c);
    if (copies < 1 || copies > S_MAX_COPIES) {
        fprintf (stderr, "kudus run: setting 'workers': 1 to %d copies of the command\n", S_MAX_COPIES);
        return 2;
    }
    char exe [1024];
    ssize_t n = readlink ("/proc/self/exe", exe, sizeof exe - 1);
    exe [n > 0 ? n : 0] = 0;
    char n_text [16];
    snprintf (n_text, sizeof n_text, "%d", copies);
    //  kudus local: the settings given, then the model and the workers,
    //  which are the copies (later flags win).
    char **local = (char **) calloc ((size_t) sep + 10, sizeof (char *));
    size_t k = 0;
    local [k++] = exe;
    local [k++] = "local";
    for (int i = 1; i < sep; i++)
        local [k++] = argv [i];
    if (!model_named) {
        local [k++] = "--model";
        local [k++] = "external";
    }
    local [k++] = "--workers";
    local [k++] = "0";
    local [k++] = "--external-workers";
    local [k++] = n_text;

    struct sigaction sa = { .sa_handler = s_on_signal };
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
    pid_t local_pid = s_spawn (local, NULL);
    pid_t pids [S_MAX_COPIES];
    char env [S_MAX_COPIES][4][64];
    for (int r = 0; r < copies; r++) {
        snprintf (env [r][0], sizeof env [r][0], "KUDUS_SCHEDULER=tcp://127.0.0.1:%d", port);
        snprintf (env [r][1], sizeof env [r][1], "KUDUS_MONITOR=tcp://127.0.0.1:%d", port + 1);
        snprintf (env [r][2], sizeof env [r][2], "KUDUS_RANK=%d", r);
        snprintf (env [r][3], sizeof env [r][3], "KUDUS_WORKERS=%d", copies);
        char *vars [] = { env [r][0], env [r][1], env [r][2], env [r][3], NULL };
        pids [r] = local_pid > 0 ? s_spawn (argv + sep + 1, vars) : -1;
    }
    int local_status = -1, failed_rank = -1, failed_status = 0, left = 0;
    for (int r = 0; r < copies; r++)
        left += pids [r] > 0;
    bool local_running = local_pid > 0, stopping = false;
    uint64_t one_side_ended = 0;
    while (local_running || left > 0) {
        int status;
        pid_t pid = waitpid (-1, &status, WNOHANG);
        if (pid == local_pid) {
            local_running = false;
            local_status = status;
        }
        else
        for (int r = 0; r < copies && pid > 0; r++)
            if (pid == pids [r]) {
                pids [r] = 0;
                left--;
                bool clean = WIFEXITED (status) && WEXITSTATUS (status) == 0;
                if (!clean && failed_rank < 0 && !stopping) {
                    failed_rank = r;
                    failed_status = status;
                }
            }
        if (pid > 0)
            continue;
        //  A signal, or one side done for long: stop the other.  The run
        //  ends on its own when the copies are done (epochs, a target), and
        //  the copies end on STOP when the run is.
        bool lopsided = local_running != (left > 0);
        if (!lopsided)
            one_side_ended = 0;
        else
        if (!one_side_ended)
            one_side_ended = kd_now_ms ();
        //  A cluster that failed (a bad setting, a port in use) is not
        //  coming: its copies are stopped at once.
        bool local_failed = !local_running && !(WIFEXITED (local_status) && WEXITSTATUS (local_status) == 0);
        bool overdue = one_side_ended && kd_now_ms () - one_side_ended > S_GRACE_MS;
        if (!stopping && (s_signal || local_failed || overdue)) {
            if (overdue && !s_signal)
                fprintf (stderr, "kudus run: %s still running %d s after the %s ended; stopping\n",
                         local_running ? "the cluster is" : "copies of the command are",
                         S_GRACE_MS / 1000, local_running ? "command" : "run");
            if (local_running)
                kill (local_pid, SIGTERM);
            for (int r = 0; r < copies; r++)
                if (pids [r] > 0)
                    kill (pids [r], SIGTERM);
            stopping = true;
        }
        usleep (S_POLL_MS * 1000);
    }
    free (local);
    if (local_pid <= 0) {
        fprintf (stderr, "kudus run: cannot start kudus local: %s\n", strerror (errno));
        return 1;
    }
    if (s_signal)
        return 128 + s_signal;
    if (failed_rank >= 0) {
        fprintf (stderr, "kudus run: copy %d of the command failed (%s %d)\n", failed_rank,
                 WIFEXITED (failed_status) ? "exit code" : "signal",
                 WIFEXITED (failed_status) ? WEXITSTATUS (failed_status) : WTERMSIG (failed_status));
        return 1;
    }
    return WIFEXITED (local_status) ? WEXITSTATUS (local_status) : 1;
}
