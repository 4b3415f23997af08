/*  kd_genctr: `kudus gen-ctr [--rows R --features F --zipf A --per-row K
    --seed S] OUT` writes a synthetic click log in LIBSVM form (gzipped when
    OUT ends in .gz) and OUT.json, which records the settings, the share of
    positive rows and the planted model's AUC on the rows written: the
    figure a trained sparse-lr model is held against.  With --test-rows N,
    N more rows from the same planted model go to OUT.test (OUT.test.gz),
    the held-out set the monitor evaluates (its --test-file).  The rows come
    from kd_ctrgen.
*/
#include "kd_cli.h"
#include "kd_ctrgen.h"
#include "kd_ctrref.h"
#include <zlib.h>

#define S_AUC_ROWS  (16u << 20)     //  rows the planted AUC is computed on at most

//  Append a decimal uint64 at p; returns the new end.
static char *
s_u64 (char *p, uint64_t v)
{
    char tmp [24];
    int n = 0;
    do {
        tmp [n++] = (char) ('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp [--n];
    return p;
}

//  A JSON number, or null for NaN.
static void
s_json_number (char *out, size_t size, double value)
{
    snprintf (out, size, isfinite (value) ? "%.6f" : "null", value);
}

//  The rows' scores and labels, for the planted model's AUC.
typedef struct {
    double *scores;
    uint8_t *labels;
    size_t n;                   //  rows kept (the first ones)
    uint64_t positives;         //  over every row written
} s_tally_t;

//  Write rows rows of gen to path (gzipped when it ends in .gz); the first
//  tally->n rows' scores and labels go into tally (when given), and every
//  row into refs (when there are held-out rows), as training rows or as
//  held-out ones.
//  Returns 0 or 1 (said).
static int
s_write_rows (kd_ctrgen_t *gen, const char *path, uint64_t rows, uint32_t per_row, s_tally_t *tally,
              kd_ctrref_t *refs, bool held_out)
{
    size_t len = strlen (path);
    bool gz = len > 3 && !strcmp (path + len - 3, ".gz");
    gzFile zf = gz ? gzopen (path, "wb1") : NULL;
    FILE *f = gz ? NULL : fopen (path, "wb");
    uint64_t *index = (uint64_t *) malloc (per_row * sizeof (uint64_t));
    //  One row is at most 2 + per_row * 23 bytes.
    size_t cap = 1 << 20, line_max = 4 + (size_t) per_row * 24;
    char *buf = (char *) malloc (cap + line_max);
    int rc = 0;
    if ((!zf && !f) || !index || !buf) {
        fprintf (stderr, "kudus gen-ctr: cannot write %s: %s\n", path, strerror (errno));
        rc = 1;
    }
    char *p = buf;
    for (uint64_t r = 0; r < rows && rc == 0; r++) {
        double score;
        int label = kd_ctrgen_row (gen, index, &score);
        if (tally)
            tally->positives += (uint64_t) label;
        if (tally && r < tally->n) {
            tally->scores [r] = score;
            tally->labels [r] = (uint8_t) label;
        }
        if (refs && held_out)
            kd_ctrref_test (refs, index, per_row, score, label);
        else
        if (refs)
            kd_ctrref_train (refs, index, per_row, score, label);
        *p++ = label ? '1' : '0';
        for (uint32_t i = 0; i < per_row; i++) {
            *p++ = ' ';
            p = s_u64 (p, index [i]);
            *p++ = ':';
            *p++ = '1';
        }
        *p++ = '\n';
        if ((size_t) (p - buf) >= cap || r + 1 == rows) {
            size_t n = (size_t) (p - buf);
            bool ok = gz ? gzwrite (zf, buf, (unsigned) n) == (int) n : fwrite (buf, 1, n, f) == n;
            if (!ok) {
                fprintf (stderr, "kudus gen-ctr: cannot write %s: %s\n", path, strerror (errno));
                rc = 1;
            }
            p = buf;
        }
    }
    if ((zf || f) && (gz ? gzclose (zf) != Z_OK : fclose (f) != 0) && rc == 0) {
        fprintf (stderr, "kudus gen-ctr: cannot finish %s\n", path);
        rc = 1;
    }
    free (index);
    free (buf);
    return rc;
}

//  Room to tally the first rows (at most S_AUC_ROWS); -1 out of memory.
static int
s_tally_init (s_tally_t *tally, uint64_t rows)
{
    tally->n = rows < S_AUC_ROWS ? (size_t) rows : S_AUC_ROWS;
    tally->scores = (double *) malloc ((tally->n + 1) * sizeof (double));
    tally->labels = (uint8_t *) malloc (tally->n + 1);
    tally->positives = 0;
    return tally->scores && tally->labels ? 0 : -1;
}

int
kd_genctr_main (int argc, char **argv)
{
    int rc = 0;
    kd_config_t *config = kd_config_from_args (KD_SVC_GENCTR, "kudus gen-ctr [--setting VALUE ...] OUT",
                                               "kudus gen-ctr", argc, argv, &rc);
    if (!config)
        return rc;
    if (kd_config_positional_count (config) != 1) {
        fprintf (stderr, "kudus gen-ctr: name one output file (OUT, or OUT.gz to compress)\n");
        kd_config_destroy (&config);
        return 2;
    }
    const char *out = kd_config_positional (config, 0);
    uint64_t rows = (uint64_t) kd_config_int (config, "rows");
    uint64_t test_rows = (uint64_t) kd_config_int (config, "test-rows");
    uint64_t features = (uint64_t) kd_config_int (config, "features");
    uint32_t per_row = (uint32_t) kd_config_int (config, "per-row");
    double zipf = kd_config_double (config, "zipf");
    uint64_t seed = (uint64_t) kd_config_int (config, "seed");
    uint64_t vocab = (uint64_t) kd_config_int (config, "vocab");
    char err [256];
    kd_ctrgen_t *gen = kd_ctrgen_new (features, zipf, per_row, seed, err, sizeof err);
    if (gen && vocab && kd_ctrgen_set_vocab (gen, vocab, err, sizeof err))
        kd_ctrgen_destroy (&gen);
    if (!gen) {
        fprintf (stderr, "kudus gen-ctr: %s\n", err);
        kd_config_destroy (&config);
        return 2;
    }
    //  The held-out rows follow the training rows from the same generator,
    //  so the same planted model labels both: OUT.test, before any .gz.
    char test [1100] = "";
    size_t len = strlen (out);
    if (len > 3 && !strcmp (out + len - 3, ".gz"))
        snprintf (test, sizeof test, "%.*s.test.gz", (int) (len - 3), out);
    else
        snprintf (test, sizeof test, "%s.test", out);
    //  The held-out rows are scored against the references of kd_ctrref,
    //  which sees every training row first.
    s_tally_t train = { 0 };
    kd_ctrref_t *refs = test_rows > 0 ? kd_ctrref_new (gen, features, test_rows < S_AUC_ROWS
                                                                         ? (size_t) test_rows : S_AUC_ROWS)
                                      : NULL;
    double t0 = kd_now_msf ();
    if (s_tally_init (&train, rows) || (test_rows > 0 && !refs)) {
        fprintf (stderr, "kudus gen-ctr: out of memory\n");
        rc = 1;
    }
    if (rc == 0)
        rc = s_write_rows (gen, out, rows, per_row, &train, refs, false);
    if (rc == 0 && test_rows > 0)
        rc = s_write_rows (gen, test, test_rows, per_row, NULL, refs, true);
    if (rc == 0) {
        double auc = kd_auc (train.scores, train.labels, train.n);
        kd_ctrref_result_t ref = refs ? kd_ctrref_result (refs)
                                      : (kd_ctrref_result_t) { NAN, NAN, NAN, NAN };
        double seconds = (kd_now_msf () - t0) / 1000;
        char meta [1100];
        snprintf (meta, sizeof meta, "%s.json", out);
        FILE *m = fopen (meta, "w");
        if (!m) {
            fprintf (stderr, "kudus gen-ctr: cannot write %s: %s\n", meta, strerror (errno));
            rc = 1;
            goto done;
        }
        char f_auc [32];
        s_json_number (f_auc, sizeof f_auc, auc);
        fprintf (m, "{\"rows\": %llu, \"features\": %llu, \"vocab\": %llu, \"zipf\": %g, \"per_row\": %u, \"seed\": %llu,\n"
                 " \"positive_share\": %.6f, \"planted_auc\": %s, \"planted_auc_rows\": %zu,\n",
                 (unsigned long long) rows, (unsigned long long) features,
                 (unsigned long long) (vocab ? vocab : features), zipf, per_row,
                 (unsigned long long) seed, (double) train.positives / (double) rows, f_auc, train.n);
        if (test_rows > 0) {
            //  JSON has no NaN: a reference left out (or an AUC of rows
            //  that are all one label) is null.
            char f_planted [32], f_seen [32], f_unseen [32], f_est [32];
            s_json_number (f_planted, sizeof f_planted, ref.planted);
            s_json_number (f_seen, sizeof f_seen, ref.seen);
            s_json_number (f_unseen, sizeof f_unseen, ref.unseen_share);
            s_json_number (f_est, sizeof f_est, ref.estimated);
            fprintf (m, " \"test_rows\": %llu, \"test_file\": \"%s\", \"planted_test_auc\": %s,\n",
                     (unsigned long long) test_rows, test, f_planted);
            fprintf (m, " \"planted_seen_test_auc\": %s, \"test_unseen_share\": %s,\n"
                     " \"estimated_test_auc\": %s,\n", f_seen, f_unseen, f_est);
        }
        fprintf (m, " \"format\": \"libsvm\", \"index_base\": 1}\n");
        fclose (m);
        printf ("kudus gen-ctr: %llu rows of %u features of %llu (zipf %g) in %.1f s to %s; "
                "positive share %.4f, planted AUC %.4f (%s)\n",
                (unsigned long long) rows, per_row, (unsigned long long) features, zipf, seconds, out,
                (double) train.positives / (double) rows, auc, meta);
        if (test_rows > 0)
            printf ("kudus gen-ctr: %llu held-out rows to %s; planted AUC on them %.4f, knowing only "
                    "the features training holds %.4f, with those estimated from their training rows "
                    "%.4f; %.1f %% of their feature draws unseen in training\n",
                    (unsigned long long) test_rows, test, ref.planted, ref.seen, ref.estimated,
                    100 * ref.unseen_share);
    }
done:
    free (train.scores);
    free (train.labels);
    kd_ctrref_destroy (&refs);
    kd_ctrgen_destroy (&gen);
    kd_config_destroy (&config);
    return rc;
}
