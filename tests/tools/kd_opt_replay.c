/*  kd_opt_replay: feed a recorded gradient sequence through kd_optimizer.

        kd_opt_replay SPEC IN OUT

    IN holds int32 n, int32 steps, then n float32 initial parameters, then
    steps * n float32 gradients; OUT receives the n final parameters.  The
    Python suite (tests/python/test_optimizer.py) feeds the same sequence
    to torch.optim and compares.
*/
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include "kd_optimizer.h"

int
main (int argc, char **argv)
{
    if (argc != 4) {
        fprintf (stderr, "usage: kd_opt_replay SPEC IN OUT\n");
        return 2;
    }
    char err [256];
    kd_optimizer_opts_t opts;
    if (kd_optimizer_parse (argv [1], &opts, err, sizeof err)) {
        fprintf (stderr, "kd_opt_replay: %s\n", err);
        return 2;
    }
    FILE *in = fopen (argv [2], "rb");
    int32_t head [2];
    if (!in || fread (head, sizeof head, 1, in) != 1 || head [0] <= 0 || head [1] < 0) {
        fprintf (stderr, "kd_opt_replay: cannot read %s\n", argv [2]);
        return 1;
    }
    size_t n = (size_t) head [0], steps = (size_t) head [1];
    float *x = malloc (n * sizeof (float)), *g = malloc (n * sizeof (float));
    kd_optimizer_t *opt = kd_optimizer_new (&opts, n);
    if (!x || !g || !opt || fread (x, sizeof (float), n, in) != n) {
        fprintf (stderr, "kd_opt_replay: bad input\n");
        return 1;
    }
    for (size_t t = 0; t < steps; t++) {
        if (fread (g, sizeof (float), n, in) != n) {
            fprintf (stderr, "kd_opt_replay: short input at step %zu\n", t);
            return 1;
        }
        kd_optimizer_step (opt, x, g);
    }
    fclose (in);
    FILE *out = fopen (argv [3], "wb");
    if (!out || fwrite (x, sizeof (float), n, out) != n || fclose (out)) {
        fprintf (stderr, "kd_opt_replay: cannot write %s\n", argv [3]);
        return 1;
    }
    kd_optimizer_destroy (&opt);
    free (x);
    free (g);
    return 0;
}
