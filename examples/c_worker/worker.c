/*  c_worker: an out-of-tree Kudus worker, built against the installed
    libkudus.  It trains softmax regression on Fashion-MNIST with its own
    gradient code (no BLAS), to show everything a worker needs: either the
    cluster's built-in softmax model, or (--model external) its own model,
    whose layout it declares and whose initial values it sends.  After the
    run it evaluates the last model it pulled on the test set.

        cc worker.c $(pkg-config --cflags --libs kudus) -lm -o c_worker
        ./c_worker tcp://127.0.0.1:7000 my-worker [DATA_DIR] [MONITOR]
*/
#include <kudus/kudus.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLASSES 10

//  Softmax regression: mean cross-entropy over the rows, its gradient in
//  grad (W [dim x 10] row-major, then b [10]).  Returns the loss.
static float
gradient (const float *params, kd_dataset_t *data, const kd_release_t *lease, float *grad,
          size_t n_params)
{
    size_t dim = kd_dataset_dim (data);
    const float *W = params, *b = params + dim * CLASSES;
    float *gW = grad, *gb = grad + dim * CLASSES;
    memset (grad, 0, n_params * sizeof (float));
    double loss = 0;
    for (size_t r = 0; r < lease->n_rows; r++) {
        const float *x = kd_dataset_images (data) + lease->rows [r] * dim;
        int y = kd_dataset_labels (data) [lease->rows [r]];
        float z [CLASSES], zmax = -INFINITY, sum = 0;
        for (int k = 0; k < CLASSES; k++) {
            z [k] = b [k];
            for (size_t i = 0; i < dim; i++)
                z [k] += x [i] * W [i * CLASSES + k];
            if (z [k] > zmax)
                zmax = z [k];
        }
        for (int k = 0; k < CLASSES; k++)
            sum += (z [k] = expf (z [k] - zmax));
        loss -= log (z [y] / sum);
        for (int k = 0; k < CLASSES; k++) {
            float d = (z [k] / sum - (k == y)) / (float) lease->n_rows;
            gb [k] += d;
            for (size_t i = 0; i < dim; i++)
                gW [i * CLASSES + k] += d * x [i];
        }
    }
    return lease->n_rows ? (float) (loss / lease->n_rows) : 0;
}

int
main (int argc, char **argv)
{
    if (argc < 3) {
        fprintf (stderr, "usage: %s SCHEDULER NAME [DATA_DIR] [MONITOR]\n", argv [0]);
        return 2;
    }
    const char *dir = argc > 3 ? argv [3] : "/usr/share/datasets/fashion-mnist";
    char err [256];
    kd_dataset_t *data = kd_dataset_load_dir (dir, "train", 0, 0, err, sizeof err);
    if (!data) {
        fprintf (stderr, "c_worker: %s\n", err);
        return 1;
    }
    kd_client_t *client = kd_client_new (argv [1], argv [2]);
    if (!client) {
        kd_dataset_destroy (&data);
        return 1;
    }
    kd_client_set_samples (client, kd_dataset_count (data));
    if (argc > 4)
        kd_client_set_monitor (client, argv [4]);
    //  Our model, should the cluster run an external one: W [dim x 10], b.
    kd_tensor_t layout [2] = {
        { .name = "W", .rows = kd_dataset_dim (data), .cols = CLASSES },
        { .name = "b", .rows = CLASSES, .cols = 1 }
    };
    kd_client_set_layout (client, layout, 2);
    int rc = 1;
    kd_release_t release;
    float *params = NULL, *grad = NULL;
    if (kd_client_register (client, 30000) != 0)
        goto done;
    //  The layout names the tensors; this worker knows softmax's two.
    const kd_tensor_t *W = kd_client_tensor (client, 0);
    bool external = !strcmp (kd_client_model (client), "external");
    if ((!external && strcmp (kd_client_model (client), "softmax")) || !W || strcmp (W->name, "W")
    ||  W->rows != kd_dataset_dim (data)) {
        fprintf (stderr, "c_worker: this example trains the softmax model, not %s\n",
                 kd_client_model (client));
        goto done;
    }
    size_t n = kd_client_param_count (client);
    params = calloc (n, sizeof (float));
    grad = calloc (n, sizeof (float));
    if (!params || !grad || kd_client_wait_start (client, &release, 60000) != 0)
        goto done;
    //  An external model starts from the values a worker sends: zeros,
    //  which suit a convex model.  Every worker may send them; the first
    //  one counts.
    if (external && kd_client_init_params (client, params) != 0)
        goto done;
    printf ("c_worker: rank %llu, %zu parameters, libkudus %s\n",
            (unsigned long long) kd_client_rank (client), n, kudus_version ());
    unsigned long iterations = 0;
    while (!kd_client_stopped (client)) {
        if (kd_client_pull (client, params))
            break;
        float loss = gradient (params, data, &release, grad, n);
        if (kd_client_push (client, grad, release.n_rows)
        ||  kd_client_arrive (client, loss, &release))
            break;
        kd_client_telemetry (client);
        iterations++;
    }
    //  Stopped by the scheduler (or a signal): a clean end.
    rc = kd_client_stopped (client) ? 0 : 1;
    printf ("c_worker: %lu iterations, model version %llu\n", iterations,
            (unsigned long long) kd_client_version (client));
    //  The last model pulled, on the test set.
    kd_dataset_t *test = kd_dataset_load_dir (dir, "t10k", 0, 0, err, sizeof err);
    if (test) {
        size_t dim = kd_dataset_dim (test), right = 0;
        for (size_t r = 0; r < kd_dataset_count (test); r++) {
            const float *x = kd_dataset_images (test) + r * dim;
            int best = 0;
            float zbest = -INFINITY;
            for (int k = 0; k < CLASSES; k++) {
                float z = params [dim * CLASSES + k];
                for (size_t i = 0; i < dim; i++)
                    z += x [i] * params [i * CLASSES + k];
                if (z > zbest) {
                    zbest = z;
                    best = k;
                }
            }
            right += best == kd_dataset_labels (test) [r];
        }
        printf ("c_worker: test accuracy %.4f\n", (double) right / (double) kd_dataset_count (test));
        kd_dataset_destroy (&test);
    }
done:
    //  The client first: it lets go of the gradient it sent.
    kd_client_destroy (&client);
    free (params);
    free (grad);
    kd_dataset_destroy (&data);
    return rc;
}
