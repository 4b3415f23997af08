/*  kd_curve: key generation, the checks at load, and an in-process CURVE
    round trip through zauth (authorized key gets through, unknown key and
    plain NULL do not).
*/
#include <criterion/criterion.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kd_internal.h"
#include "kd_testutil.h"

static char *s_dir;             //  fresh temporary directory per test
static char s_keys [512];       //  s_dir/keys

static void
setup (void)
{
    s_dir = kd_test_tmpdir ();
    cr_assert (s_dir);
    snprintf (s_keys, sizeof s_keys, "%s/keys", s_dir);
}

static void
teardown (void)
{
    kd_curve_keys_remove (s_keys);
    rmdir (s_dir);
    free (s_dir);
}

TestSuite (kd_curve, .init = setup, .fini = teardown);

//  Mode bits of a file, or -1.
static int
s_mode (const char *dir, const char *name)
{
    char path [700];
    snprintf (path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat (path, &st) == 0 ? (int) (st.st_mode & 0777) : -1;
}

static void
s_write (const char *dir, const char *name, const char *text)
{
    char path [700];
    snprintf (path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen (path, "w");
    cr_assert (f);
    fputs (text, f);
    fclose (f);
}

Test (kd_curve, keygen_writes_layout_with_private_secrets)
{
    char err [512] = "";
    cr_assert_eq (kd_curve_keygen (s_keys, err, sizeof err), 0, "%s", err);
    cr_expect_eq (s_mode (s_keys, "server.cert_secret"), 0600);
    cr_expect_eq (s_mode (s_keys, "client.cert_secret"), 0600);
    cr_expect_eq (s_mode (s_keys, "server.cert"), 0644);
    cr_expect_eq (s_mode (s_keys, "client.cert"), 0644);
    cr_expect_eq (s_mode (s_keys, "allowed/client.cert"), 0644);
    cr_expect_eq (s_mode (s_keys, "allowed/client.cert_secret"), -1);
    //  The allowed entry is the client's public key, and the keys differ.
    char path [700];
    snprintf (path, sizeof path, "%s/client.cert", s_keys);
    zcert_t *client = zcert_load (path);
    snprintf (path, sizeof path, "%s/allowed/client.cert", s_keys);
    zcert_t *allowed = zcert_load (path);
    snprintf (path, sizeof path, "%s/server.cert", s_keys);
    zcert_t *server = zcert_load (path);
    cr_assert (client && allowed && server);
    cr_expect_str_eq (zcert_public_txt (client), zcert_public_txt (allowed));
    cr_expect_str_neq (zcert_public_txt (client), zcert_public_txt (server));
    //  The workers' key, and one more per role, each naming its role.
    cr_expect_str_eq (zcert_meta (client, "role"), "worker");
    const char *roles [] = { "scheduler", "shard", "monitor", "observer", "evaluator" };
    for (int i = 0; i < 5; i++) {
        snprintf (path, sizeof path, "%s/%s.cert", s_keys, roles [i]);
        zcert_t *mine = zcert_load (path);
        snprintf (path, sizeof path, "%s/allowed/%s.cert", s_keys, roles [i]);
        zcert_t *listed = zcert_load (path);
        cr_assert (mine && listed, "no key pair for role %s", roles [i]);
        cr_expect_str_eq (zcert_meta (listed, "role"), roles [i]);
        cr_expect_str_eq (zcert_public_txt (mine), zcert_public_txt (listed));
        cr_expect_str_neq (zcert_public_txt (mine), zcert_public_txt (client));
        char secret [64];
        snprintf (secret, sizeof secret, "%s.cert_secret", roles [i]);
        cr_expect_eq (s_mode (s_keys, secret), 0600);
        zcert_destroy (&mine);
        zcert_destroy (&listed);
    }
    zcert_destroy (&client);
    zcert_destroy (&allowed);
    zcert_destroy (&server);
    //  Keys in use are never overwritten.
    cr_expect_eq (kd_curve_keygen (s_keys, err, sizeof err), -1);
    cr_expect (strstr (err, "already exists"), "%s", err);
}

Test (kd_curve, off_is_a_no_op)
{
    kd_config_t *config = kd_config_new (KD_SVC_SHARD, "test");
    char err [256];
    kd_curve_t *curve = kd_curve_new (config, KD_CURVE_SERVER | KD_CURVE_CLIENT, err, sizeof err);
    cr_assert (curve);
    cr_expect_not (kd_curve_enabled (curve));
    cr_expect_eq (kd_curve_start_auth (curve), 0);
    zsock_t *sock = zsock_new (ZMQ_ROUTER);
    cr_expect_eq (kd_curve_server (curve, sock), 0);
    cr_expect_eq (zsock_mechanism (sock), ZMQ_NULL);
    cr_expect_eq (kd_curve_client (NULL, sock), 0);
    zsock_destroy (&sock);
    kd_curve_destroy (&curve);
    cr_expect_null (curve);
    kd_config_destroy (&config);
}

Test (kd_curve, missing_and_bad_keys_are_refused_with_the_file_named)
{
    char err [512] = "";
    //  Curve on with a keys dir that does not exist.
    kd_config_t *config = kd_config_new (KD_SVC_SCHEDULER, "test");
    cr_assert_eq (kd_config_set (config, "curve", "1", err, sizeof err), 0);
    cr_assert_eq (kd_config_set (config, "keys-dir", s_keys, err, sizeof err), 0);
    cr_expect_null (kd_curve_new (config, KD_CURVE_SERVER, err, sizeof err));
    cr_expect (strstr (err, "server.cert_secret") && strstr (err, "kudus keygen"), "%s", err);
    cr_expect_null (kd_curve_new (config, KD_CURVE_CLIENT, err, sizeof err));
    cr_expect (strstr (err, "client.cert_secret"), "%s", err);
    kd_config_destroy (&config);

    cr_assert_eq (kd_curve_keygen (s_keys, err, sizeof err), 0, "%s", err);
    kd_curve_t *curve = kd_curve_new_dir (s_keys, KD_CURVE_SERVER | KD_CURVE_CLIENT, err, sizeof err);
    cr_assert (curve, "%s", err);
    cr_expect (kd_curve_enabled (curve));
    cr_expect_eq (kd_curve_allowed_count (curve), 6, "one key per role");
    kd_curve_destroy (&curve);

    //  A second copy of the same client key would make zcertstore assert.
    char allowed [600];
    snprintf (allowed, sizeof allowed, "%s/allowed", s_keys);
    char *text = NULL;
    {
        char path [700];
        snprintf (path, sizeof path, "%s/client.cert", allowed);
        text = kd_test_slurp (path);
    }
    cr_assert (text);
    s_write (allowed, "copy.cert", text);
    cr_expect_null (kd_curve_new_dir (s_keys, KD_CURVE_SERVER, err, sizeof err));
    cr_expect (strstr (err, "same client key"), "%s", err);
    //  A file that is no certificate is skipped, not counted.
    s_write (allowed, "copy.cert", "metadata\n    name = \"not a certificate\"\n");
    curve = kd_curve_new_dir (s_keys, KD_CURVE_SERVER, err, sizeof err);
    cr_expect (curve && kd_curve_allowed_count (curve) == 6, "%s", err);
    kd_curve_destroy (&curve);
    char path [700];
    snprintf (path, sizeof path, "%s/copy.cert", allowed);
    unlink (path);

    //  No authorized client at all: a server would be useless.
    const char *roles [] = { "client", "scheduler", "shard", "monitor", "observer", "evaluator" };
    char *role_texts [6];
    for (int i = 0; i < 6; i++) {
        snprintf (path, sizeof path, "%s/%s.cert", allowed, roles [i]);
        role_texts [i] = kd_test_slurp (path);
        cr_assert (role_texts [i], "no %s", path);
        unlink (path);
    }
    cr_expect_null (kd_curve_new_dir (s_keys, KD_CURVE_SERVER, err, sizeof err));
    cr_expect (strstr (err, "no client certificates"), "%s", err);
    //  A client only needs its own pair and the server's public key.
    curve = kd_curve_new_dir (s_keys, KD_CURVE_CLIENT, err, sizeof err);
    cr_expect (curve, "%s", err);
    kd_curve_destroy (&curve);
    for (int i = 0; i < 6; i++) {
        char name [32];
        snprintf (name, sizeof name, "%s.cert", roles [i]);
        s_write (allowed, name, role_texts [i]);
        free (role_texts [i]);
    }
    free (text);

    //  A corrupted secret certificate.
    s_write (s_keys, "server.cert_secret", "curve\n    secret-key = \"short\"\n");
    cr_expect_null (kd_curve_new_dir (s_keys, KD_CURVE_SERVER, err, sizeof err));
    cr_expect (strstr (err, "not a valid secret certificate"), "%s", err);
    //  A missing server public key, for a client.
    snprintf (path, sizeof path, "%s/server.cert", s_keys);
    unlink (path);
    cr_expect_null (kd_curve_new_dir (s_keys, KD_CURVE_CLIENT, err, sizeof err));
    cr_expect (strstr (err, "server.cert"), "%s", err);
    snprintf (path, sizeof path, "%s/server.cert_secret", s_keys);
    unlink (path);
}

//  A DEALER with a receive timeout, connected to endpoint.
static zsock_t *
s_dealer (const char *endpoint, kd_curve_t *curve, zcert_t *own, const char *server_key)
{
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    zsock_set_rcvtimeo (sock, 700);
    zsock_set_sndtimeo (sock, 200);
    zsock_set_linger (sock, 0);
    if (curve)
        kd_curve_client (curve, sock);
    if (own) {
        zcert_apply (own, sock);
        zsock_set_curve_serverkey (sock, server_key);
    }
    cr_assert_eq (zsock_connect (sock, "%s", endpoint), 0);
    return sock;
}

//  True if the server echoes a ping sent through sock.
static bool
s_round_trip (zsock_t *server, zsock_t *sock)
{
    zstr_send (sock, "ping");
    zpoller_t *poller = zpoller_new (server, NULL);
    bool got = zpoller_wait (poller, 700) == server;
    zpoller_destroy (&poller);
    if (got) {
        zmsg_t *msg = zmsg_recv (server);
        zmsg_send (&msg, server);       //  echo to the same identity
        char *reply = zstr_recv (sock);
        got = reply && !strcmp (reply, "ping");
        zstr_free (&reply);
    }
    return got;
}

Test (kd_curve, zauth_admits_only_allowed_keys)
{
    char err [512] = "";
    cr_assert_eq (kd_curve_keygen (s_keys, err, sizeof err), 0, "%s", err);
    kd_curve_t *curve = kd_curve_new_dir (s_keys, KD_CURVE_SERVER | KD_CURVE_CLIENT, err, sizeof err);
    cr_assert (curve, "%s", err);
    cr_assert_eq (kd_curve_start_auth (curve), 0);
    kd_curve_t *second = kd_curve_new_dir (s_keys, KD_CURVE_SERVER, err, sizeof err);
    cr_expect_eq (kd_curve_start_auth (second), -1, "a second ZAP handler in one process");
    kd_curve_destroy (&second);

    zsock_t *server = zsock_new (ZMQ_ROUTER);
    zsock_set_linger (server, 0);
    kd_curve_server (curve, server);
    cr_expect_eq (zsock_mechanism (server), ZMQ_CURVE);
    int port = zsock_bind (server, "tcp://127.0.0.1:*");
    cr_assert (port > 0);
    char endpoint [64];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", port);

    zsock_t *good = s_dealer (endpoint, curve, NULL, NULL);
    cr_expect (s_round_trip (server, good), "authorized client got no answer");
    zsock_destroy (&good);

    zsock_t *plain = s_dealer (endpoint, NULL, NULL, NULL);
    cr_expect_not (s_round_trip (server, plain), "NULL client got through");
    zsock_destroy (&plain);

    char path [700];
    snprintf (path, sizeof path, "%s/server.cert", s_keys);
    zcert_t *server_pub = zcert_load (path);
    zcert_t *stranger = zcert_new ();
    zsock_t *unknown = s_dealer (endpoint, NULL, stranger, zcert_public_txt (server_pub));
    cr_expect_not (s_round_trip (server, unknown), "unknown key got through");
    zsock_destroy (&unknown);

    //  Adding the stranger's certificate to allowed/ admits it at once.
    snprintf (path, sizeof path, "%s/allowed/stranger.cert", s_keys);
    zcert_save_public (stranger, path);
    unknown = s_dealer (endpoint, NULL, stranger, zcert_public_txt (server_pub));
    cr_expect (s_round_trip (server, unknown), "a newly allowed key was refused");
    zsock_destroy (&unknown);
    unlink (path);

    zcert_destroy (&stranger);
    zcert_destroy (&server_pub);
    zsock_destroy (&server);
    kd_curve_destroy (&curve);
}

Test (kd_curve, keygen_temp_and_remove)
{
    char err [256];
    char *dir = kd_curve_keygen_temp (err, sizeof err);
    cr_assert (dir, "%s", err);
    cr_expect_eq (s_mode (dir, "client.cert_secret"), 0600);
    kd_curve_keys_remove (dir);
    struct stat st;
    cr_expect_neq (stat (dir, &st), 0, "temporary keys left behind");
    free (dir);
}
