/*  kudus bench compute: a worker's gradient throughput.

    kd_model_gradient (the call a worker makes per minibatch) on real
    Fashion-MNIST batches, against a bare loop written here with OpenBLAS
    alone: the same forward and backward sgemm calls, softmax and
    cross-entropy on the same batches, with no Kudus code.  Both walk the
    training set in consecutive batches of --batch rows with --threads
    OpenBLAS threads, and the figure is samples per second, reported with
    the ratio kudus / bare.
*/
#include "kd_bench.h"
#include <cblas.h>
#include <math.h>

//  Scratch of the bare loop for one model.
typedef struct {
    int kind;                   //  KD_MODEL_SOFTMAX or KD_MODEL_MLP
    int hidden;                 //  H (mlp)
    float *hid;                 //  [batch x H]
    float *dhid;                //  [batch x H]
    float *logits;              //  [batch x 10]
} s_bare_t;

//  Bare gradient of the mean cross-entropy: the textbook passes with
//  cblas_sgemm.  Layout as in kd_model.h.  Returns the loss.
static float
s_bare_gradient (s_bare_t *m, const float *params, const float *X, const uint8_t *y,
                 int n, float *grad)
{
    const int D = KD_INPUT_DIM, C = KD_CLASSES, H = m->hidden;
    const float *w1 = params, *b1, *w2 = NULL, *b2 = NULL;
    float *gw1 = grad, *gb1, *gw2 = NULL, *gb2 = NULL;
    const float *in = X;
    int width = D;
    if (m->kind == KD_MODEL_SOFTMAX) {
        b1 = params + D * C;
        gb1 = grad + D * C;
    }
    else {
        b1 = params + D * H;
        w2 = b1 + H;
        b2 = w2 + H * C;
        gb1 = grad + D * H;
        gw2 = gb1 + H;
        gb2 = gw2 + H * C;
        //  Hidden layer: relu (X W1 + b1).
        for (int r = 0; r < n; r++)
            memcpy (m->hid + (size_t) r * H, b1, (size_t) H * sizeof (float));
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, H, D,
                     1.0f, X, D, w1, H, 1.0f, m->hid, H);
        for (size_t i = 0; i < (size_t) n * H; i++)
            if (m->hid [i] < 0)
                m->hid [i] = 0;
        in = m->hid;
        width = H;
    }
    const float *wo = m->kind == KD_MODEL_SOFTMAX ? w1 : w2;
    const float *bo = m->kind == KD_MODEL_SOFTMAX ? b1 : b2;
    for (int r = 0; r < n; r++)
        memcpy (m->logits + (size_t) r * C, bo, C * sizeof (float));
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, n, C, width,
                 1.0f, in, width, wo, C, 1.0f, m->logits, C);
    //  Softmax, loss, and dL/dlogits = (p - onehot) / n in place.
    double loss = 0;
    for (int r = 0; r < n; r++) {
        float *z = m->logits + (size_t) r * C, max = z [0], sum = 0;
        for (int c = 1; c < C; c++)
            max = z [c] > max ? z [c] : max;
        for (int c = 0; c < C; c++) {
            z [c] = expf (z [c] - max);
            sum += z [c];
        }
        loss -= log (z [y [r]] / sum);
        for (int c = 0; c < C; c++)
            z [c] = (z [c] / sum - (c == y [r])) / (float) n;
    }
    float *gwo = m->kind == KD_MODEL_SOFTMAX ? gw1 : gw2;
    float *gbo = m->kind == KD_MODEL_SOFTMAX ? gb1 : gb2;
    cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, width, C, n,
                 1.0f, in, width, m->logits, C, 0.0f, gwo, C);
    memset (gbo, 0, C * sizeof (float));
    for (int r = 0; r < n; r++)
        for (int c = 0; c < C; c++)
            gbo [c] += m->logits [(size_t) r * C + c];
    if (m->kind == KD_MODEL_MLP) {
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, n, H, C,
                     1.0f, m->logits, C, w2, C, 0.0f, m->dhid, H);
        for (size_t i = 0; i < (size_t) n * H; i++)
            if (m->hid [i] <= 0)
                m->dhid [i] = 0;
        cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans, D, H, n,
                     1.0f, X, D, m->dhid, H, 0.0f, gw1, H);
        memset (gb1, 0, (size_t) H * sizeof (float));
        for (int r = 0; r < n; r++)
            for (int h = 0; h < H; h++)
                gb1 [h] += m->dhid [(size_t) r * H + h];
    }
    return (float) (loss / n);
}

int
kd_bench_compute (kd_bench_t *b)
{
    char err [512];
    kd_dataset_t *data = kd_dataset_load_dir (kd_config_str (b->config, "data-dir"), "train",
                                              0, 0, err, sizeof err);
    if (!data) {
        fprintf (stderr, "kudus bench compute: %s\n", err);
        return 1;
    }
    openblas_set_num_threads ((int) kd_config_int (b->config, "threads"));
    size_t batch = (size_t) kd_config_int (b->config, "batch");
    int hidden = (int) kd_config_int (b->config, "hidden");
    int iterations = (int) kd_config_int (b->config, "iterations");
    size_t rows = kd_dataset_count (data);
    if (batch > rows)
        batch = rows;
    const float *images = kd_dataset_images (data);
    const uint8_t *labels = kd_dataset_labels (data);
    char models [64];
    snprintf (models, sizeof models, "%s", kd_config_str (b->config, "models"));
    int rc = 0;
    bool header = false;
    char *save = NULL;
    for (char *name = strtok_r (models, ",", &save); name && rc == 0;
         name = strtok_r (NULL, ",", &save)) {
        int kind = kd_model_kind_parse (name);
        if (kind < 0) {
            fprintf (stderr, "kudus bench compute: unknown model '%s'\n", name);
            rc = 2;
            break;
        }
        uint32_t h = kind == KD_MODEL_MLP ? (uint32_t) hidden : 0;
        size_t n_params = kd_model_param_count (kind, h);
        float *params = (float *) malloc (n_params * sizeof (float));
        float *grad = (float *) malloc (n_params * sizeof (float));
        kd_model_t *model = kd_model_new (kind, h, batch);
        s_bare_t bare = { .kind = kind, .hidden = (int) h };
        bare.logits = (float *) malloc (batch * KD_CLASSES * sizeof (float));
        bare.hid = (float *) malloc (batch * (h ? h : 1) * sizeof (float));
        bare.dhid = (float *) malloc (batch * (h ? h : 1) * sizeof (float));
        assert (params && grad && model && bare.logits && bare.hid && bare.dhid);
        kd_model_init_range (kind, h, 42, 0, n_params, params);
        double kudus [KD_BENCH_MAX_LIST * 4], ref [KD_BENCH_MAX_LIST * 4];
        int repeat = b->repeat < KD_BENCH_MAX_LIST * 4 ? b->repeat : KD_BENCH_MAX_LIST * 4;
        volatile float sink = 0;
        //  The two loops take turns per repeat (after an untimed round of
        //  each), so that load on the machine touches both alike.
        for (int r = -1; r < repeat; r++) {
            for (int which = 0; which < 2; which++) {
                int its = r < 0 ? 10 : iterations;
                size_t at = 0;
                double t0 = kd_now_msf ();
                for (int i = 0; i < its; i++) {
                    if (at + batch > rows)
                        at = 0;
                    const float *X = images + at * KD_INPUT_DIM;
                    const uint8_t *y = labels + at;
                    sink += which == 0
                          ? kd_model_gradient (model, params, X, y, batch, grad)
                          : s_bare_gradient (&bare, params, X, y, (int) batch, grad);
                    at += batch;
                }
                double secs = (kd_now_msf () - t0) / 1000.0;
                if (r >= 0)
                    (which == 0 ? kudus : ref) [r] = (double) its * (double) batch / secs;
            }
        }
        (void) sink;
        double k = kd_bench_median (kudus, repeat), bare_rate = kd_bench_median (ref, repeat);
        char v [8][32];
        snprintf (v [0], 32, "\"%s\"", name);
        snprintf (v [1], 32, "%d", (int) h);
        snprintf (v [2], 32, "%zu", batch);
        snprintf (v [3], 32, "%d", (int) kd_config_int (b->config, "threads"));
        snprintf (v [4], 32, "%.0f", k);
        snprintf (v [5], 32, "%.0f", bare_rate);
        snprintf (v [6], 32, "%.3f", k / bare_rate);
        snprintf (v [7], 32, "%d", repeat);
        const char *kv [] = {
            "model", v [0], "hidden", v [1], "batch", v [2], "threads", v [3],
            "kudus_samples_per_s", v [4], "blas_samples_per_s", v [5],
            "ratio_vs_blas", v [6], "repeat", v [7], NULL };
        kd_bench_row (b, "compute", &header, kv);
        kd_model_destroy (&model);
        free (params);
        free (grad);
        free (bare.logits);
        free (bare.hid);
        free (bare.dhid);
    }
    kd_dataset_destroy (&data);
    return rc;
}
