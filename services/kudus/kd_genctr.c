/*  kd_genctr: `kudus gen-ctr [--rows R --features F --zipf A --per-row K
    --seed S] OUT` writes a synthetic click log in LIBSVM form (gzipped when
    OUT ends in .gz) and OUT.json, which records the settings, the share of
    positive rows and the planted model's AUC on the rows written: the
    figure a trained sparse-lr model is held against.  The rows come from
    kd_ctrgen.
*/
#include "kd_cli.h"
#include "kd_ctrgen.h"
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
    uint64_t features = (uint64_t) kd_config_int (config, "features");
    uint32_t per_row = (uint32_t) kd_config_int (config, "per-row");
    double zipf = kd_config_double (config, "zipf");
    uint64_t seed = (uint64_t) kd_config_int (config, "seed");
    char err [256];
    kd_ctrgen_t *gen = kd_ctrgen_new (features, zipf, per_row, seed, err, sizeof err);
    if (!gen) {
        fprintf (stderr, "kudus gen-ctr: %s\n", err);
        kd_config_destroy (&config);
        return 2;
    }
    size_t len = strlen (out);
    bool gz = len > 3 && !strcmp (out + len - 3, ".gz");
    gzFile zf = NULL;
    FILE *f = NULL;
    if (gz)
        zf = gzopen (out, "wb1");
    else
        f = fopen (out, "wb");
    size_t n_auc = rows < S_AUC_ROWS ? (size_t) rows : S_AUC_ROWS;
    double *scores = (double *) malloc (n_auc * sizeof (double));
    uint8_t *labels = (uint8_t *) malloc (n_auc);
    uint64_t *index = (uint64_t *) malloc (per_row * sizeof (uint64_t));
    //  One row is at most 2 + per_row * 23 bytes.
    size_t cap = 1 << 20, line_max = 4 + (size_t) per_row * 24;
    char *buf = (char *) malloc (cap + line_max);
    if ((!zf && !f) || !scores || !labels || !index || !buf) {
        fprintf (stderr, "kudus gen-ctr: cannot write %s: %s\n", out, strerror (errno));
        rc = 1;
        goto done;
    }
    uint64_t positives = 0;
    double t0 = kd_now_msf ();
    char *p = buf;
    for (uint64_t r = 0; r < rows && rc == 0; r++) {
        double score;
        int label = kd_ctrgen_row (gen, index, &score);
        positives += (uint64_t) label;
        if (r < n_auc) {
            scores [r] = score;
            labels [r] = (uint8_t) label;
        }
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
                fprintf (stderr, "kudus gen-ctr: cannot write %s: %s\n", out, strerror (errno));
                rc = 1;
            }
            p = buf;
        }
    }
    if ((gz ? gzclose (zf) != Z_OK : fclose (f) != 0) && rc == 0) {
        fprintf (stderr, "kudus gen-ctr: cannot finish %s\n", out);
        rc = 1;
    }
    zf = NULL;
    f = NULL;
    if (rc == 0) {
        double auc = kd_ctrgen_auc (scores, labels, n_auc);
        double seconds = (kd_now_msf () - t0) / 1000;
        char meta [1100];
        snprintf (meta, sizeof meta, "%s.json", out);
        FILE *m = fopen (meta, "w");
        if (!m) {
            fprintf (stderr, "kudus gen-ctr: cannot write %s: %s\n", meta, strerror (errno));
            rc = 1;
            goto done;
        }
        fprintf (m, "{\"rows\": %llu, \"features\": %llu, \"zipf\": %g, \"per_row\": %u, \"seed\": %llu,\n"
                 " \"positive_share\": %.6f, \"planted_auc\": %.6f, \"planted_auc_rows\": %zu,\n"
                 " \"format\": \"libsvm\", \"index_base\": 1}\n",
                 (unsigned long long) rows, (unsigned long long) features, zipf, per_row,
                 (unsigned long long) seed, (double) positives / (double) rows, auc, n_auc);
        fclose (m);
        printf ("kudus gen-ctr: %llu rows of %u features of %llu (zipf %g) in %.1f s to %s; "
                "positive share %.4f, planted AUC %.4f (%s)\n",
                (unsigned long long) rows, per_row, (unsigned long long) features, zipf, seconds, out,
                (double) positives / (double) rows, auc, meta);
    }
done:
    if (zf)
        gzclose (zf);
    if (f)
        fclose (f);
    free (scores);
    free (labels);
    free (index);
    free (buf);
    kd_ctrgen_destroy (&gen);
    kd_config_destroy (&config);
    return rc;
}
