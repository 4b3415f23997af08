/*  What a keyed (sparse) shard refuses, in process: a scheduler of an
    external model and two shards run as actors of this test, and a
    kd_client registers a keyed layout of 1,000 keys of 4 values.

    - The client's own checks: unsorted keys, a key past the end, a dense
      call on a keyed model.
    - Raw requests to a shard: keys outside its range, a value count that
      does not fit, a dense request to a keyed shard, each answered with
      ERROR 400 naming why; a good keyed pull is still served after them.

    Training a keyed model end to end is tests/integration/test_sparse.c.
*/
#include <criterion/criterion.h>
#include "kd_internal.h"
#include "kd_testutil.h"
#include "kd_inproc.h"

TestSuite (keyed, .init = kd_inproc_setup, .fini = kd_inproc_teardown, .timeout = 120);

Test (keyed, a_keyed_shard_refuses_what_does_not_fit)
{
    //  What `kudus local --model external --external-workers 1 --shards 2`
    //  starts: a scheduler and two shards, here as actors.
    char sched [64], shard [2][64];
    snprintf (sched, sizeof sched, "tcp://127.0.0.1:%d", kd_inproc_port ());
    const char *a_sched [] = { "--bind", sched, "--model", "external", "--min-workers", "1", "--shards", "2",
                               "--consistency", "bsp", "--max-seconds", "20", NULL };
    kd_inproc_run (KD_SVC_SCHEDULER, "scheduler", a_sched);
    for (int i = 0; i < 2; i++) {
        char name [16];
        snprintf (name, sizeof name, "shard-%d", i);
        snprintf (shard [i], sizeof shard [i], "tcp://127.0.0.1:%d", kd_inproc_port () + 100 + i);
        const char *a_shard [] = { "--bind", shard [i], "--scheduler", sched, "--name", name, NULL };
        kd_inproc_run (KD_SVC_SHARD, name, a_shard);
    }
    kd_client_t *c = kd_client_new (sched, "prober");
    kd_client_set_samples (c, 100);
    cr_assert_eq (kd_client_set_keyed_layout (c, "emb", 1000, 4), 0);
    kd_release_t rel;
    cr_assert_eq (kd_client_register (c, 30000), 0);
    cr_assert_eq (kd_client_wait_start (c, &rel, 60000), 0);
    cr_expect (kd_client_keyed (c));
    cr_expect_eq (kd_client_param_count (c), 1000, "a keyed model counts keys");
    //  The client's own checks: unsorted keys, a key past the end, dense calls.
    const uint64_t unsorted [] = { 5, 3 }, past [] = { 1000 };
    //  Room for the whole model: a dense pull that went through by mistake
    //  fails the test instead of overrunning the stack.
    float *v = (float *) calloc (4000, sizeof (float));
    cr_assert (v);
    cr_expect_eq (kd_client_pull_keys (c, unsorted, 2, v), -1);
    cr_expect_eq (kd_client_pull_keys (c, past, 1, v), -1);
    cr_expect_eq (kd_client_pull (c, v), -1, "a dense pull of a keyed model");
    //  Keys that span both shards read back as zeros.
    const uint64_t keys [] = { 0, 499, 500, 999 };
    cr_assert_eq (kd_client_pull_keys (c, keys, 4, v), 0);
    for (int i = 0; i < 16; i++)
        cr_expect_eq (v [i], 0.0f);

    //  Raw requests to the shard of keys [0, 500): the one that answers a
    //  keyed pull of key 0.
    zsock_t *d = NULL;
    for (int i = 0; i < 2 && !d; i++) {
        d = kd_test_dealer (shard [i]);
        cr_assert (d);
        kd_msg_t *m = kd_msg_new (KD_MSG_PULL);
        kd_msg_set_uint (m, KD_F_VERSION, 0);
        kd_msg_set_keys (m, keys, 1);
        cr_assert_eq (kd_msg_send (&m, d), 0);
        kd_msg_t *reply = NULL;
        kd_msg_err_t err;
        cr_assert_eq (kd_msg_recv (d, &reply, NULL, &err), 0);
        if (kd_msg_type (reply) != KD_MSG_PULL_OK || kd_msg_uint (reply, KD_F_COUNT) != 4)
            zsock_destroy (&d);
        kd_msg_destroy (&reply);
    }
    cr_assert (d, "no shard serves key 0");
    struct {
        const uint64_t *keys;
        size_t n, values;
        bool push;
        const char *why;
    } bad [] = {
        { (const uint64_t []) { 10, 700 }, 2, 8, true, "outside" },
        { (const uint64_t []) { 10, 20 }, 2, 4, true, "values" },
        { (const uint64_t []) { 600 }, 1, 0, false, "outside" },
        { NULL, 0, 0, false, "keyed" },
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad [0]; b++) {
        kd_msg_t *m = kd_msg_new (bad [b].push ? KD_MSG_PUSH : KD_MSG_PULL);
        if (bad [b].push) {
            kd_msg_set_uint (m, KD_F_RANK, 0);
            kd_msg_set_uint (m, KD_F_CLOCK, 0);
            kd_msg_set_uint (m, KD_F_BASE, 0);
            kd_msg_set_uint (m, KD_F_LO, 0);
            zframe_t *data = zframe_new (NULL, bad [b].values * sizeof (float));
            memset (zframe_data (data), 0, zframe_size (data));
            kd_msg_set_data (m, &data);
        }
        else
            kd_msg_set_uint (m, KD_F_VERSION, 0);
        if (bad [b].keys)
            kd_msg_set_keys (m, bad [b].keys, bad [b].n);
        cr_assert_eq (kd_msg_send (&m, d), 0);
        kd_msg_t *reply = NULL;
        kd_msg_err_t err;
        cr_assert_eq (kd_msg_recv (d, &reply, NULL, &err), 0, "case %zu: no answer", b);
        cr_expect_eq (kd_msg_type (reply), KD_MSG_ERROR, "case %zu", b);
        cr_expect_eq (kd_msg_uint (reply, KD_F_CODE), KD_ERR_MALFORMED, "case %zu", b);
        cr_expect (strstr (kd_msg_str (reply, KD_F_REASON), bad [b].why), "case %zu: %s", b,
                   kd_msg_str (reply, KD_F_REASON));
        kd_msg_destroy (&reply);
    }
    //  And it still serves a good keyed pull.
    cr_expect_eq (kd_client_pull_keys (c, keys, 4, v), 0);
    zsock_destroy (&d);
    kd_client_destroy (&c);
    free (v);
}
