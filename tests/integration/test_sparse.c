/*  Integration tests: a keyed (sparse) model end to end.

    `kudus gen-ctr` writes a click log with a planted logistic model; a
    `kudus local` cluster with two shards and two kd_client workers (threads
    of this test) trains sparse logistic regression on it, each worker
    pulling and pushing only the keys its lease touches, under each of the
    five consistency models.  The first worker pulls the test rows' keys
    now and then and scores them: the held-out AUC must come close to the
    planted model's.  What a keyed shard refuses is tested in process
    (tests/inproc/test_keyed_refusals.c).
*/
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <sys/wait.h>
#include <kudus/kudus.h>
#include "kd_internal.h"
#include "kd_testutil.h"

#define S_FEATURES  5000
#define S_PER_ROW   12
#define S_TRAIN     16000
#define S_TEST      2000
#define S_WORKERS   2
#define S_KEYS      (S_FEATURES + 1)    //  key 0 is the bias, key i feature i

static char *s_dir;
static int s_port;

//  The click log, rows in CSR form: the first S_TRAIN train, then test.
typedef struct {
    size_t rows;
    size_t *start;              //  row r's entries are [start [r], start [r + 1])
    uint64_t *index;            //  feature indices, increasing per row
    float *label;               //  0 or 1
    double planted_auc;         //  of the generator's own model
} s_data_t;

static s_data_t s_data;

static void
s_load (void)
{
    char path [512], meta [600], err [256];
    snprintf (path, sizeof path, "%s/ctr.svm.gz", s_dir);
    snprintf (meta, sizeof meta, "%s.json", path);
    char rows [16], features [16], per_row [16];
    snprintf (rows, sizeof rows, "%d", S_TRAIN + S_TEST);
    snprintf (features, sizeof features, "%d", S_FEATURES);
    snprintf (per_row, sizeof per_row, "%d", S_PER_ROW);
    const char *argv [] = { "kudus", "gen-ctr", "--rows", rows, "--features", features, "--per-row",
                            per_row, "--zipf", "1.1", "--seed", "11", path, NULL };
    int status = -1;
    pid_t pid = kd_test_spawn (argv, NULL);
    cr_assert (kd_test_wait (pid, 60000, &status) && WIFEXITED (status) && WEXITSTATUS (status) == 0);
    kd_libsvm_t *r = kd_libsvm_open (path, S_FEATURES, err, sizeof err);
    cr_assert (r, "%s", err);
    size_t n = S_TRAIN + S_TEST;
    s_data.rows = n;
    s_data.start = calloc (n + 1, sizeof (size_t));
    s_data.index = calloc (n * S_PER_ROW, sizeof (uint64_t));
    s_data.label = calloc (n, sizeof (float));
    kd_libsvm_row_t row;
    size_t at = 0, got = 0;
    int rc;
    while (got < n && (rc = kd_libsvm_next (r, &row, err, sizeof err)) == 1) {
        cr_assert (row.nnz <= S_PER_ROW);
        s_data.start [got] = at;
        memcpy (s_data.index + at, row.index, row.nnz * sizeof (uint64_t));
        at += row.nnz;
        s_data.label [got++] = row.label > 0 ? 1.0f : 0.0f;
    }
    s_data.start [got] = at;
    cr_assert_eq (got, n, "%s", err);
    kd_libsvm_destroy (&r);
    char *json = kd_test_slurp (meta);
    cr_assert (json);
    s_data.planted_auc = kd_test_json_number (json, "planted_auc");
    free (json);
    cr_assert (s_data.planted_auc > 0.6, "planted AUC %g", s_data.planted_auc);
}

static void
setup (void)
{
    s_dir = kd_test_tmpdir ();
    cr_assert (s_dir);
    s_port = kd_test_base_port ();
    s_load ();
}

static void
teardown (void)
{
    free (s_data.start);
    free (s_data.index);
    free (s_data.label);
    free (s_dir);
}

TestSuite (sparse, .init = setup, .fini = teardown, .timeout = 240);

static int
s_cmp_u64 (const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}

//  The distinct keys of some rows (the bias first), sorted; returns their
//  count.  keys holds 1 + rows * S_PER_ROW entries.
static size_t
s_keys_of (const uint64_t *rows, size_t n_rows, uint64_t *keys)
{
    size_t n = 0;
    keys [n++] = 0;
    for (size_t r = 0; r < n_rows; r++)
        for (size_t e = s_data.start [rows [r]]; e < s_data.start [rows [r] + 1]; e++)
            keys [n++] = s_data.index [e];
    qsort (keys, n, sizeof keys [0], s_cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || keys [i] != keys [u - 1])
            keys [u++] = keys [i];
    return u;
}

static int
s_key_cmp (const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return (x > y) - (x < y);
}

//  Index of key in sorted keys (present by construction).
static size_t
s_find (const uint64_t *keys, size_t n, uint64_t key)
{
    const uint64_t *hit = (const uint64_t *) bsearch (&key, keys, n, sizeof *keys, s_key_cmp);
    return (size_t) (hit - keys);
}

//  The score of row r under the values of keys.
static double
s_score (size_t r, const uint64_t *keys, size_t n, const float *w)
{
    double z = w [0];
    for (size_t e = s_data.start [r]; e < s_data.start [r + 1]; e++)
        z += w [s_find (keys, n, s_data.index [e])];
    return z;
}

typedef struct {
    double score;
    float label;
} s_scored_t;

static int
s_cmp_scored (const void *a, const void *b)
{
    double x = ((const s_scored_t *) a)->score, y = ((const s_scored_t *) b)->score;
    return x < y ? -1 : x > y;
}

//  AUC of the test rows: the chance that a random click outscores a random
//  non-click (ties count half), by ranks.
static double
s_test_auc (const uint64_t *keys, size_t n, const float *w)
{
    s_scored_t *s = calloc (S_TEST, sizeof *s);
    for (size_t i = 0; i < S_TEST; i++) {
        s [i].score = s_score (S_TRAIN + i, keys, n, w);
        s [i].label = s_data.label [S_TRAIN + i];
    }
    qsort (s, S_TEST, sizeof *s, s_cmp_scored);
    double pos = 0, neg = 0, rank_sum = 0;
    for (size_t i = 0; i < S_TEST; ) {
        size_t j = i;
        while (j < S_TEST && s [j].score == s [i].score)
            j++;
        double rank = (double) (i + j + 1) / 2;     //  mean 1-based rank of the tie
        for (size_t k = i; k < j; k++)
            if (s [k].label > 0) {
                rank_sum += rank;
                pos++;
            }
            else
                neg++;
        i = j;
    }
    free (s);
    return pos > 0 && neg > 0 ? (rank_sum - pos * (pos + 1) / 2) / (pos * neg) : 0.5;
}

typedef struct {
    int index;
    char scheduler [64], monitor [64];
    unsigned long iterations;
    double auc;                 //  worker 0: the last test AUC
    double first_loss, last_loss;
    int rc;
} s_worker_t;

static void *
s_worker (void *arg)
{
    s_worker_t *me = (s_worker_t *) arg;
    char name [32];
    snprintf (name, sizeof name, "sparse-%d", me->index);
    kd_client_t *c = kd_client_new (me->scheduler, name);
    kd_client_set_samples (c, S_TRAIN);
    kd_client_set_monitor (c, me->monitor);
    kd_client_set_keyed_layout (c, "w", S_KEYS, 1);
    me->rc = -1;
    me->auc = NAN;
    kd_release_t rel;
    uint64_t *keys = NULL, *test_keys = NULL;
    float *w = NULL, *g = NULL, *test_w = NULL;
    size_t n_test = 0;
    if (kd_client_register (c, 30000) || !kd_client_keyed (c) || kd_client_wait_start (c, &rel, 60000))
        goto done;
    size_t cap = 1 + kd_client_batch (c) * S_PER_ROW;
    keys = calloc (cap, sizeof (uint64_t));
    w = calloc (cap, sizeof (float));
    g = calloc (cap, sizeof (float));
    if (me->index == 0) {
        uint64_t *all = calloc (S_TEST, sizeof (uint64_t));
        for (size_t i = 0; i < S_TEST; i++)
            all [i] = S_TRAIN + i;
        test_keys = calloc (1 + S_TEST * S_PER_ROW, sizeof (uint64_t));
        n_test = s_keys_of (all, S_TEST, test_keys);
        test_w = calloc (n_test, sizeof (float));
        free (all);
    }
    me->first_loss = NAN;
    while (!kd_client_stopped (c)) {
        size_t n = s_keys_of (rel.rows, rel.n_rows, keys);
        if (kd_client_pull_keys (c, keys, n, w))
            break;
        memset (g, 0, n * sizeof (float));
        double loss = 0;
        for (size_t r = 0; r < rel.n_rows; r++) {
            size_t row = rel.rows [r];
            double p = 1 / (1 + exp (-s_score (row, keys, n, w)));
            float y = s_data.label [row];
            loss -= y > 0 ? log (p + 1e-12) : log (1 - p + 1e-12);
            float d = (float) (p - y) / (float) rel.n_rows;
            g [0] += d;
            for (size_t e = s_data.start [row]; e < s_data.start [row + 1]; e++)
                g [s_find (keys, n, s_data.index [e])] += d;
        }
        loss = rel.n_rows ? loss / (double) rel.n_rows : 0;
        //  The first ten batches' mean, and a running mean of the recent ones.
        if (me->iterations < 10)
            me->first_loss = (isnan (me->first_loss) ? 0 : me->first_loss) + loss / 10;
        me->last_loss = me->iterations == 0 ? loss : 0.9 * me->last_loss + 0.1 * loss;
        if (kd_client_push_keys (c, keys, n, g, rel.n_rows) || kd_client_arrive (c, (float) loss, &rel))
            break;
        kd_client_telemetry (c);
        me->iterations++;
        if (me->index == 0 && me->iterations % 10 == 0 && !kd_client_stopped (c)
        &&  kd_client_pull_keys (c, test_keys, n_test, test_w) == 0)
            me->auc = s_test_auc (test_keys, n_test, test_w);
    }
    me->rc = kd_client_stopped (c) ? 0 : -1;
done:
    kd_client_destroy (&c);
    free (keys);
    free (w);
    free (g);
    free (test_keys);
    free (test_w);
    return NULL;
}

//  One run under a consistency model: the test's external workers, and
//  builtin kudus-worker processes training sparse-lr on train_file; the
//  monitor evaluates test_file when one is named.  Returns worker 0's last
//  test AUC; the summary's test metric goes to *summary_auc if asked.
static double
s_run (const char *consistency, const char *extra_flag, const char *extra_value, int externals,
       int builtin, const char *train_file, const char *test_file, double *summary_auc)
{
    char port [16], log [512], summary [512], n_ext [8], n_builtin [8], features [16];
    snprintf (port, sizeof port, "%d", s_port);
    snprintf (log, sizeof log, "%s/local-%s-%d.log", s_dir, consistency, builtin);
    snprintf (summary, sizeof summary, "%s/summary-%s-%d.json", s_dir, consistency, builtin);
    snprintf (n_ext, sizeof n_ext, "%d", externals);
    snprintf (n_builtin, sizeof n_builtin, "%d", builtin);
    snprintf (features, sizeof features, "%d", S_FEATURES);
    const char *argv [40] = { "kudus", "local", "--model", builtin ? "sparse-lr" : "external",
                              "--workers", n_builtin, "--external-workers", n_ext, "--shards", "2",
                              "--consistency", consistency, "--batch", "50", "--epochs", "2",
                              "--optimizer", "adagrad", "--lr", "0.2", "--base-port", port,
                              "--quiet", "true", "--summary", summary, extra_flag, extra_value,
                              "--features", features };
    size_t argc = 30;
    if (builtin) {
        argv [argc++] = "--train-file";
        argv [argc++] = train_file;
    }
    if (test_file) {
        argv [argc++] = "--test-file";
        argv [argc++] = test_file;
    }
    argv [argc] = NULL;
    pid_t pid = kd_test_spawn (argv, log);
    s_worker_t w [S_WORKERS];
    pthread_t t [S_WORKERS];
    for (int i = 0; i < externals; i++) {
        w [i] = (s_worker_t) { .index = i };
        snprintf (w [i].scheduler, sizeof w [i].scheduler, "tcp://127.0.0.1:%d", s_port);
        snprintf (w [i].monitor, sizeof w [i].monitor, "tcp://127.0.0.1:%d", s_port + 1);
        pthread_create (&t [i], NULL, s_worker, &w [i]);
    }
    for (int i = 0; i < externals; i++)
        pthread_join (t [i], NULL);
    int status = -1;
    bool exited = kd_test_wait (pid, 60000, &status);
    bool failed = !exited || !WIFEXITED (status) || WEXITSTATUS (status) != 0;
    for (int i = 0; i < externals; i++)
        failed = failed || w [i].rc;
    if (failed)
        kd_test_dump (log);
    cr_expect (exited && WIFEXITED (status) && WEXITSTATUS (status) == 0, "%s: kudus local failed",
               consistency);
    for (int i = 0; i < externals; i++) {
        cr_expect_eq (w [i].rc, 0, "%s: worker %d failed", consistency, i);
        cr_expect (w [i].iterations > 20, "%s: worker %d: %lu iterations", consistency, i, w [i].iterations);
    }
    cr_expect (w [0].last_loss < w [0].first_loss, "%s: loss %.4f -> %.4f", consistency,
               w [0].first_loss, w [0].last_loss);
    kd_test_kill (pid);
    //  Every worker, built-in or not, had its share of the rows applied.
    char *json = kd_test_slurp (summary);
    cr_assert (json, "%s: no summary", consistency);
    cr_expect (strstr (json, builtin ? "\"model\": \"sparse-lr\"" : "\"model\": \"external\""),
               "%s: the summary names another model", consistency);
    int listed = 0;
    for (const char *at = strstr (json, "\"applied_samples\": "); at;
         at = strstr (at + 1, "\"applied_samples\": ")) {
        cr_expect (atol (at + strlen ("\"applied_samples\": ")) > 1000, "%s: a worker had too few rows: %.40s",
                   consistency, at);
        listed++;
    }
    cr_expect_eq (listed, externals + builtin, "%s: %d workers in the summary", consistency, listed);
    if (summary_auc) {
        cr_expect (strstr (json, "\"test_metric\": \"auc\""), "%s: no AUC metric in the summary", consistency);
        *summary_auc = kd_test_json_number (json, "test_auc");
    }
    printf ("FIGURE sparse %s (%d external, %d built-in workers): planted AUC %.4f, learned %.4f; "
            "loss %.4f -> %.4f; train_loss %.4f\n",
            consistency, externals, builtin, s_data.planted_auc, w [0].auc, w [0].first_loss,
            w [0].last_loss, kd_test_json_number (json, "train_loss"));
    fflush (stdout);
    free (json);
    s_port += 20;
    return w [0].auc;
}

Test (sparse, sparse_lr_trains_under_every_consistency_model)
{
    struct {
        const char *model, *flag, *value;
    } runs [] = {
        { "bsp", "--seed", "1" }, { "asp", "--seed", "1" }, { "ssp", "--staleness", "2" },
        { "lsp", "--quota", "1" }, { "alsp", "--seed", "1" },
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs [0]; i++) {
        double auc = s_run (runs [i].model, runs [i].flag, runs [i].value, S_WORKERS, 0, NULL, NULL, NULL);
        //  The planted model is the best there is; 16,000 rows of a
        //  5,000-feature log learn most of it (0.80 against 0.85).
        cr_expect (auc > s_data.planted_auc - 0.08, "%s: AUC %.4f, planted %.4f", runs [i].model, auc,
                   s_data.planted_auc);
    }
}

//  Rows [first, end) of the click log as a LIBSVM file.
static void
s_write_rows (const char *path, size_t first, size_t end)
{
    FILE *f = fopen (path, "w");
    cr_assert (f);
    for (size_t r = first; r < end; r++) {
        fprintf (f, "%d", (int) s_data.label [r]);
        for (size_t e = s_data.start [r]; e < s_data.start [r + 1]; e++)
            fprintf (f, " %llu:1", (unsigned long long) s_data.index [e]);
        fputc ('\n', f);
    }
    fclose (f);
}

//  The built-in worker's sparse-lr (kudus-worker --model sparse-lr) reads
//  the train rows from a LIBSVM file; two of them and one of this test's
//  workers train one model, which worker 0 scores on the held-out rows,
//  and the monitor too, from the same rows as a file (--test-file).
Test (sparse, the_built_in_worker_trains_sparse_lr_from_a_file)
{
    char path [512], test [512];
    snprintf (path, sizeof path, "%s/train.svm", s_dir);
    snprintf (test, sizeof test, "%s/test.svm", s_dir);
    s_write_rows (path, 0, S_TRAIN);
    s_write_rows (test, S_TRAIN, S_TRAIN + S_TEST);
    double monitor_auc = NAN;
    double auc = s_run ("lsp", "--quota", "2", 1, 2, path, test, &monitor_auc);
    cr_expect (auc > s_data.planted_auc - 0.08, "AUC %.4f, planted %.4f", auc, s_data.planted_auc);
    //  The monitor scores the final model; worker 0 scored the one it last
    //  pulled, a few updates earlier: the two agree closely.
    cr_expect (monitor_auc > s_data.planted_auc - 0.08 && fabs (monitor_auc - auc) < 0.02,
               "monitor's held-out AUC %.4f, worker 0's %.4f, planted %.4f", monitor_auc, auc,
               s_data.planted_auc);
    //  A held-out file that cannot be read stops the monitor with a reason.
    char mlog [512];
    snprintf (mlog, sizeof mlog, "%s/monitor-no-file.log", s_dir);
    const char *margv [] = { "kudus-monitor", "--test-file", "/nonexistent/test.svm", NULL };
    int mstatus = -1;
    pid_t mpid = kd_test_spawn (margv, mlog);
    cr_assert (kd_test_wait (mpid, 30000, &mstatus));
    cr_expect (WIFEXITED (mstatus) && WEXITSTATUS (mstatus) != 0);
    cr_expect_eq (kd_test_count (mlog, "setting 'test-file'"), 1);
    //  Without a train file, kudus local says what is missing.
    char log [512];
    snprintf (log, sizeof log, "%s/no-file.log", s_dir);
    const char *argv [] = { "kudus", "local", "--model", "sparse-lr", "--workers", "2", NULL };
    int status = -1;
    pid_t pid = kd_test_spawn (argv, log);
    cr_assert (kd_test_wait (pid, 30000, &status));
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 2);
    cr_expect_eq (kd_test_count (log, "needs --train-file"), 1);
}

//  What a keyed shard refuses, answered with ERROR and counted, while it
//  keeps serving: keys outside its range, values that do not fit, a dense
//  pull, and an INIT.
