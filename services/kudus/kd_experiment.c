/*  kd_experiment: `kudus experiment SCENARIO --out DIR` runs every
    consistency model on the same scenario and seeds, one after the other,
    each as a `kudus local` cluster, and writes:

        DIR/accuracy.csv   test accuracy against time, every run
        DIR/accuracy.png   the same, one line per model (first seed; gnuplot)
        DIR/results.md     medians over the seeds: time to 0.80, final
                           accuracy, updates/s, wait fraction, staleness
                           p50/p99, drops, regroups
        DIR/runs/          each run's summary JSON, curve CSV and log

    Every run trains on the same number of samples (--epochs), so final
    accuracies compare like with like.  The curve comes from model snapshots
    the monitor takes every --snapshot-ms and evaluates after training, so
    measuring costs the run nothing.
*/
#include "kd_cli.h"
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_MODELS    5
#define S_MAX_SEEDS 9
#define S_TARGET    0.80

static const char *s_models [S_MODELS] = { "bsp", "asp", "ssp", "lsp", "alsp" };

typedef struct {
    double time_to_target;      //  seconds, NAN if never reached
    double final_accuracy;      //  summary test_accuracy
    double updates_per_s;       //  summary
    double wait_fraction;       //  summary
    double p50, p99;            //  staleness
    double dropped, regroups;   //  counts
    double wall;                //  seconds
} s_result_t;

//  Median of n values, NANs last (a run that never reached the target).
static double
s_median (double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0; j--) {
            bool swap = isnan (v [j - 1]) ? !isnan (v [j]) : (!isnan (v [j]) && v [j] < v [j - 1]);
            if (!swap)
                break;
            double t = v [j]; v [j] = v [j - 1]; v [j - 1] = t;
        }
    return v [n / 2];
}

//  A number from a flat JSON object.
static double
s_json_number (const char *json, const char *key)
{
    char pattern [64];
    snprintf (pattern, sizeof pattern, "\"%s\":", key);
    const char *p = json ? strstr (json, pattern) : NULL;
    if (!p)
        return NAN;
    char *end;
    double v = strtod (p + strlen (pattern), &end);
    return end == p + strlen (pattern) ? NAN : v;
}

//  Run one `kudus local`.  Returns its exit status.
static int
s_run_local (char **argv, const char *log_path)
{
    pid_t pid = fork ();
    if (pid == 0) {
        FILE *log = freopen (log_path, "w", stdout);
        if (log)
            dup2 (fileno (stdout), STDERR_FILENO);
        execv (argv [0], argv);
        _exit (127);
    }
    int status = -1;
    while (waitpid (pid, &status, 0) < 0 && errno == EINTR)
        if (zsys_interrupted)
            kill (pid, SIGTERM);
    return WIFEXITED (status) ? WEXITSTATUS (status) : 128;
}

int
kd_experiment_main (int argc, char **argv)
{
    int rc = 0;
    kd_config_t *c = kd_config_from_args (KD_SVC_LOCAL | KD_SVC_BENCH, "kudus experiment SCENARIO --out DIR",
                                          "kudus experiment", argc, argv, &rc);
    if (!c)
        return rc;
    char err [512];
    //  The scenarios' shape, unless the user says otherwise: 8 workers with
    //  an emulated compute time, so that speed differences mean something
    //  on a small machine.
    static const char *shape [][2] = {
        { "workers", "8" }, { "delay-ms", "10" }, { "epochs", "3" }, { "snapshot-ms", "25" },
        //  Plain SGD: momentum compounds staleness differently under each
        //  model, which would confound the comparison.
        { "lr", "0.2" }, { "momentum", "0" }
    };
    for (size_t i = 0; i < sizeof shape / sizeof shape [0]; i++)
        if (!kd_config_is_set (c, shape [i][0]))
            kd_config_set (c, shape [i][0], shape [i][1], err, sizeof err);
    const char *scenario = kd_config_positional (c, 0);
    const char *out = kd_config_str (c, "out");
    int seeds = (int) kd_config_int (c, "seeds");
    const char *extra [8];
    int n_extra = 0;
    if (!scenario || !*out) {
        fprintf (stderr, "kudus experiment: usage: kudus experiment "
                         "homogeneous|static-straggler|dynamic --out DIR [--seeds N]\n");
        kd_config_destroy (&c);
        return 2;
    }
    if (!strcmp (scenario, "homogeneous"))
        ;
    else
    if (!strcmp (scenario, "static-straggler")) {
        extra [n_extra++] = "--straggler";
        extra [n_extra++] = "0:4";
    }
    else
    if (!strcmp (scenario, "dynamic")) {
        extra [n_extra++] = "--hetero";
        extra [n_extra++] = "dynamic";
        extra [n_extra++] = "--hetero-period";
        extra [n_extra++] = "15";
    }
    else {
        fprintf (stderr, "kudus experiment: unknown scenario '%s' "
                         "(homogeneous, static-straggler, dynamic)\n", scenario);
        kd_config_destroy (&c);
        return 2;
    }
    char runs [1200];
    snprintf (runs, sizeof runs, "%s/runs", out);
    //  Like mkdir -p: every missing parent, then runs/.
    for (char *p = runs + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir (runs, 0755);
            *p = '/';
        }
    mkdir (runs, 0755);
    struct stat st;
    if (stat (runs, &st) != 0 || !S_ISDIR (st.st_mode)) {
        fprintf (stderr, "kudus experiment: cannot create '%s': %s\n", runs, strerror (errno));
        kd_config_destroy (&c);
        return 1;
    }
    char self_exe [1024];
    ssize_t n = readlink ("/proc/self/exe", self_exe, sizeof self_exe - 1);
    self_exe [n > 0 ? n : 0] = 0;
    //  Each run's `kudus local` reads the CURVE switch from the environment.
    setenv ("KUDUS_CURVE", kd_config_bool (c, "curve") ? "1" : "0", 1);
    if (kd_config_is_set (c, "keys-dir"))
        setenv ("KUDUS_KEYS_DIR", kd_config_str (c, "keys-dir"), 1);

    static s_result_t results [S_MODELS][S_MAX_SEEDS];
    char csv_path [1300];
    snprintf (csv_path, sizeof csv_path, "%s/accuracy.csv", out);
    FILE *csv = fopen (csv_path, "w");
    if (!csv) {
        fprintf (stderr, "kudus experiment: cannot write '%s': %s\n", csv_path, strerror (errno));
        kd_config_destroy (&c);
        return 1;
    }
    fprintf (csv, "scenario,model,seed,seconds,version,accuracy\n");
    for (int s = 0; s < seeds && !zsys_interrupted; s++) {
        for (int m = 0; m < S_MODELS && !zsys_interrupted; m++) {
            char base [1400], summary [1500], curve [1500], log [1500];
            snprintf (base, sizeof base, "%s/%s-%s-seed%d", runs, scenario, s_models [m], s + 1);
            snprintf (summary, sizeof summary, "%s.json", base);
            snprintf (curve, sizeof curve, "%s.csv", base);
            snprintf (log, sizeof log, "%s.log", base);
            char seed [32], port [16], workers [16], epochs [32], delay [32], snap [16], lr [32];
            char staleness [16], batch [16];
            snprintf (seed, sizeof seed, "%lld", (long long) kd_config_int (c, "seed") + s);
            snprintf (port, sizeof port, "%lld", (long long) kd_config_int (c, "base-port"));
            snprintf (workers, sizeof workers, "%lld", (long long) kd_config_int (c, "workers"));
            snprintf (epochs, sizeof epochs, "%g", kd_config_double (c, "epochs"));
            snprintf (delay, sizeof delay, "%g", kd_config_double (c, "delay-ms"));
            snprintf (snap, sizeof snap, "%lld", (long long) kd_config_int (c, "snapshot-ms"));
            //  ASP and SSP take one step per gradient where the others take
            //  one step per average of N: the linear-scaling rule gives
            //  them lr / N, the same step per sample.
            double run_lr = kd_config_double (c, "lr");
            if (!strcmp (s_models [m], "asp") || !strcmp (s_models [m], "ssp"))
                run_lr /= (double) kd_config_int (c, "workers");
            snprintf (lr, sizeof lr, "%g", run_lr);
            char momentum [32];
            snprintf (momentum, sizeof momentum, "%g", kd_config_double (c, "momentum"));
            snprintf (staleness, sizeof staleness, "%lld", (long long) kd_config_int (c, "staleness"));
            snprintf (batch, sizeof batch, "%lld", (long long) kd_config_int (c, "batch"));
            char *args [64] = {
                self_exe, "local", "--consistency", (char *) s_models [m], "--seed", seed,
                "--base-port", port, "--workers", workers, "--epochs", epochs, "--delay-ms", delay,
                "--snapshot-ms", snap, "--curve-file", curve, "--summary", summary, "--lr", lr,
                "--staleness", staleness, "--batch", batch, "--eval-interval", "2", "--quiet",
                "--momentum", momentum
            };
            int na = 0;
            while (args [na])
                na++;
            for (int i = 0; i < n_extra; i++)
                args [na++] = (char *) extra [i];
            args [na] = NULL;
            printf ("experiment: %s %s seed %s ... ", scenario, s_models [m], seed);
            fflush (stdout);
            int status = s_run_local (args, log);
            char *json = kd_read_file (summary);
            s_result_t *r = &results [m][s];
            r->final_accuracy = s_json_number (json, "test_accuracy");
            r->updates_per_s = s_json_number (json, "updates_per_second");
            r->wait_fraction = s_json_number (json, "wait_fraction");
            r->p50 = s_json_number (json, "staleness_p50");
            r->p99 = s_json_number (json, "staleness_p99");
            r->dropped = s_json_number (json, "dropped_gradients");
            r->regroups = s_json_number (json, "regroups");
            r->wall = s_json_number (json, "wall_seconds");
            r->time_to_target = NAN;
            free (json);
            FILE *f = fopen (curve, "r");
            char line [256];
            while (f && fgets (line, sizeof line, f)) {
                double sec, acc;
                unsigned long long version;
                if (sscanf (line, "%lf,%llu,%lf", &sec, &version, &acc) != 3)
                    continue;
                fprintf (csv, "%s,%s,%d,%.3f,%llu,%.4f\n", scenario, s_models [m], s + 1, sec, version, acc);
                if (isnan (r->time_to_target) && acc >= S_TARGET)
                    r->time_to_target = sec;
            }
            if (f)
                fclose (f);
            printf ("status %d, time to %.2f %.2f s, final accuracy %.4f, wall %.1f s\n",
                    status, S_TARGET, r->time_to_target, r->final_accuracy, r->wall);
            fflush (stdout);
            if (status != 0)
                rc = 1;
        }
    }
    fclose (csv);

    //  The table, medians over seeds.
    char md_path [1300];
    snprintf (md_path, sizeof md_path, "%s/results.md", out);
    FILE *md = fopen (md_path, "w");
    if (md) {
        fprintf (md, "# Scenario `%s`\n\n%lld workers, softmax, %g epochs, delay %g ms per iteration, "
                 "batch %lld, lr %g (ASP and SSP: lr / N), momentum %g, staleness bound %lld; "
                 "%d seed(s) from %lld; medians over seeds.\n\n",
                 scenario, (long long) kd_config_int (c, "workers"), kd_config_double (c, "epochs"),
                 kd_config_double (c, "delay-ms"), (long long) kd_config_int (c, "batch"),
                 kd_config_double (c, "lr"), kd_config_double (c, "momentum"),
                 (long long) kd_config_int (c, "staleness"), seeds, (long long) kd_config_int (c, "seed"));
        fprintf (md, "| model | time to 0.80 (s) | vs BSP | final accuracy | updates/s | wait fraction "
                     "| staleness p50 | staleness p99 | drops | regroups | wall (s) |\n");
        fprintf (md, "|---|---|---|---|---|---|---|---|---|---|---|\n");
        double bsp_t = NAN;
        for (int m = 0; m < S_MODELS; m++) {
            double v [9][S_MAX_SEEDS];
            for (int s = 0; s < seeds; s++) {
                s_result_t *r = &results [m][s];
                double row [9] = { r->time_to_target, r->final_accuracy, r->updates_per_s, r->wait_fraction,
                                   r->p50, r->p99, r->dropped, r->regroups, r->wall };
                for (int k = 0; k < 9; k++)
                    v [k][s] = row [k];
            }
            double med [9];
            for (int k = 0; k < 9; k++)
                med [k] = s_median (v [k], seeds);
            if (m == 0)
                bsp_t = med [0];
            char t [32], ratio [32];
            if (isnan (med [0]))
                snprintf (t, sizeof t, "not reached");
            else
                snprintf (t, sizeof t, "%.2f", med [0]);
            if (isnan (med [0]) || isnan (bsp_t))
                snprintf (ratio, sizeof ratio, "-");
            else
                snprintf (ratio, sizeof ratio, "%.2fx", med [0] / bsp_t);
            fprintf (md, "| %s | %s | %s | %.4f | %.1f | %.3f | %.0f | %.0f | %.0f | %.0f | %.1f |\n",
                     s_models [m], t, ratio, med [1], med [2], med [3], med [4], med [5], med [6],
                     med [7], med [8]);
        }
        fprintf (md, "\nPer run (time to 0.80 s / final accuracy):\n\n");
        for (int m = 0; m < S_MODELS; m++) {
            fprintf (md, "- %s:", s_models [m]);
            for (int s = 0; s < seeds; s++)
                fprintf (md, " %.2f / %.4f%s", results [m][s].time_to_target,
                         results [m][s].final_accuracy, s + 1 < seeds ? ";" : "");
            fprintf (md, "\n");
        }
        fprintf (md, "\n![accuracy against time](accuracy.png)\n");
        fclose (md);
    }

    //  The plot: first seed of every model.
    char gp_path [1300], png_path [1300];
    snprintf (gp_path, sizeof gp_path, "%s/accuracy.gp", out);
    snprintf (png_path, sizeof png_path, "%s/accuracy.png", out);
    FILE *gp = fopen (gp_path, "w");
    if (gp) {
        fprintf (gp, "set terminal pngcairo size 900,560\nset output '%s'\n"
                     "set datafile separator ','\nset title 'Kudus: %s, test accuracy against time'\n"
                     "set xlabel 'seconds'\nset ylabel 'test accuracy'\nset yrange [0.5:0.9]\n"
                     "set key bottom right\nset grid\n", png_path, scenario);
        fprintf (gp, "plot ");
        for (int m = 0; m < S_MODELS; m++)
            fprintf (gp, "%s'%s' using ($3==1 && strcol(2) eq '%s' ? $4 : 1/0):6 with lines lw 2 title '%s'",
                     m ? ", " : "", csv_path, s_models [m], s_models [m]);
        fprintf (gp, "\n");
        fclose (gp);
        char *cmd = zsys_sprintf ("gnuplot '%s' 2>&1", gp_path);
        if (system (cmd) != 0)
            fprintf (stderr, "kudus experiment: gnuplot failed; the CSV and table are still written\n");
        zstr_free (&cmd);
    }
    printf ("experiment: wrote %s, %s, %s\n", csv_path, png_path, md_path);
    kd_config_destroy (&c);
    return rc;
}
