/*  kd_curve: CURVE keys, the ZAP handler, and the one-line socket hooks
    (see kd_curve.h).

    Every check happens at load, so that a service with curve on but a
    missing or bad key refuses to start with a message naming the file,
    instead of failing later (a worker connects to the shards only once
    training starts) or, worse, running CURVE without a ZAP handler.
*/
#include "kd_curve.h"
#include "kd_log.h"
#include "kd_util.h"
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#define S_KEY_TXT     40                //  Z85 text of a 32-byte key
#define S_PATH_MAX    256               //  zcert_load's own buffer size
#define S_ZAP_DOMAIN  "kudus"           //  ZAP domain our server sockets ask for
#define S_NULL_KEY    "0000000000000000000000000000000000000000"

struct _kd_curve_t {
    bool enabled;                   //  curve on
    int roles;                      //  KD_CURVE_SERVER | KD_CURVE_CLIENT
    char *dir;                      //  keys directory
    char *allowed;                  //  dir/allowed, zauth's certificate store
    size_t allowed_count;           //  authorized client certificates at load
    zcert_t *server;                //  server key pair (servers)
    zcert_t *client;                //  client key pair (clients)
    char server_key [S_KEY_TXT + 1];    //  server public key, Z85 (clients)
    zactor_t *auth;                 //  zauth actor, once started
};

static kd_curve_t *s_process = NULL;    //  the instance of this process
//  A service run as an actor has its own instance, in its own thread.
static __thread kd_curve_t *s_thread = NULL;
static const char *s_identity = "worker";   //  whose client key kd_curve_new loads

//  The roles keygen issues keys for, and the file of each.
static const struct {
    const char *role, *file;
} s_role_files [] = {
    { "worker", KD_CURVE_CLIENT_CERT }, { "scheduler", "scheduler.cert" },
    { "shard", "shard.cert" }, { "monitor", "monitor.cert" }, { "observer", "observer.cert" },
    { "evaluator", "evaluator.cert" }
};
#define S_ROLES (sizeof s_role_files / sizeof s_role_files [0])

//  File of a role's key pair, or NULL for an unknown role.
static const char *
s_role_file (const char *role)
{
    for (size_t i = 0; i < S_ROLES; i++)
        if (!strcmp (s_role_files [i].role, role))
            return s_role_files [i].file;
    return NULL;
}
static bool s_auth_running = false;     //  one ZAP handler per process

//  ---------------------------------------------------------------------
//  Loading and checking keys

//  True when text is a valid Z85-encoded 32-byte key.
static bool
s_key_valid (const char *text)
{
    uint8_t bin [32];
    return text && strlen (text) == S_KEY_TXT && zmq_z85_decode (bin, text) != NULL;
}

//  Load a key pair from path (public) and path_secret.
static zcert_t *
s_load_pair (const char *path, char *err, size_t err_size)
{
    char secret [S_PATH_MAX + 16];
    snprintf (secret, sizeof secret, "%s_secret", path);
    struct stat st;
    if (strlen (secret) >= S_PATH_MAX) {
        snprintf (err, err_size, "curve: key path too long: %s", secret);
        return NULL;
    }
    if (stat (secret, &st) != 0) {
        snprintf (err, err_size, "curve: missing secret certificate %s (%s); "
                  "create keys with 'kudus keygen DIR' and set keys-dir", secret, strerror (errno));
        return NULL;
    }
    if (access (secret, R_OK) != 0) {
        snprintf (err, err_size, "curve: cannot read secret certificate %s: %s",
                  secret, strerror (errno));
        return NULL;
    }
    //  zcert_load falls back to the public file when the secret one does
    //  not parse, which leaves a null secret key: check for that too.
    zcert_t *cert = zcert_load (path);
    if (!cert || !strcmp (zcert_secret_txt (cert), S_NULL_KEY)
    ||  !s_key_valid (zcert_public_txt (cert)) || !s_key_valid (zcert_secret_txt (cert))) {
        snprintf (err, err_size, "curve: %s is not a valid secret certificate", secret);
        zcert_destroy (&cert);
        return NULL;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO))
        kd_warn ("curve: secret certificate is readable by others path=%s mode=%03o",
                 secret, (unsigned) (st.st_mode & 0777));
    return cert;
}

//  Read the public key of a public certificate into out (41 bytes).  Only
//  the public file is read, so a client never loads a server's secret.
static int
s_load_public (const char *path, char *out, char *err, size_t err_size)
{
    zconfig_t *root = zconfig_load (path);
    if (!root) {
        snprintf (err, err_size, "curve: missing or unreadable certificate %s; "
                  "create keys with 'kudus keygen DIR' and set keys-dir", path);
        return -1;
    }
    const char *key = zconfig_get (root, "/curve/public-key", NULL);
    int rc = -1;
    if (s_key_valid (key)) {
        snprintf (out, S_KEY_TXT + 1, "%s", key);
        rc = 0;
    }
    else
        snprintf (err, err_size, "curve: %s holds no valid public key", path);
    zconfig_destroy (&root);
    return rc;
}

//  Count the client certificates of allowed/ as zauth will see them (every
//  regular file below it, "*_secret" skipped).  A duplicate key is refused
//  here because zcertstore asserts on one.
static int
s_check_allowed (const char *dir, size_t *count, char *err, size_t err_size)
{
    *count = 0;
    struct stat st;
    if (stat (dir, &st) != 0 || !S_ISDIR (st.st_mode)) {
        snprintf (err, err_size, "curve: missing directory of allowed client certificates %s", dir);
        return -1;
    }
    zdir_t *zdir = zdir_new (dir, NULL);
    if (!zdir) {
        snprintf (err, err_size, "curve: cannot read %s", dir);
        return -1;
    }
    zhash_t *seen = zhash_new ();
    zhash_autofree (seen);
    zfile_t **files = zdir_flatten (zdir);
    int rc = 0;
    for (size_t i = 0; files && files [i] && rc == 0; i++) {
        const char *name = zfile_filename (files [i], NULL);
        size_t len = strlen (name);
        if (!zfile_is_regular (files [i]) || (len >= 7 && !strcmp (name + len - 7, "_secret")))
            continue;
        char key [S_KEY_TXT + 1], why [512];
        if (s_load_public (name, key, why, sizeof why) != 0) {
            kd_warn ("curve: skipping file without a public key in allowed path=%s", name);
            continue;
        }
        const char *other = (const char *) zhash_lookup (seen, key);
        if (other) {
            snprintf (err, err_size, "curve: %s and %s hold the same client key", other, name);
            rc = -1;
        }
        else {
            zhash_insert (seen, key, (void *) name);
            (*count)++;
        }
    }
    zdir_flatten_free (&files);
    zhash_destroy (&seen);
    zdir_destroy (&zdir);
    if (rc == 0 && *count == 0) {
        snprintf (err, err_size, "curve: no client certificates in %s "
                  "(copy the public certificates of authorized clients there)", dir);
        rc = -1;
    }
    return rc;
}

//  ---------------------------------------------------------------------
//  The class

kd_curve_t *
kd_curve_new_dir (const char *dir, int roles, char *err, size_t err_size)
{
    return kd_curve_new_as (dir, roles, "worker", err, err_size);
}

void
kd_curve_set_identity (const char *identity)
{
    assert (identity && s_role_file (identity));
    s_identity = identity;
}

kd_curve_t *
kd_curve_new_as (const char *dir, int roles, const char *identity, char *err, size_t err_size)
{
    assert (dir);
    assert (identity);
    assert (roles & (KD_CURVE_SERVER | KD_CURVE_CLIENT));
    if (!zsys_has_curve ()) {
        snprintf (err, err_size, "curve: this libzmq was built without CURVE support");
        return NULL;
    }
    if (!*dir) {
        snprintf (err, err_size, "curve: setting 'keys-dir' is empty");
        return NULL;
    }
    kd_curve_t *self = (kd_curve_t *) zmalloc (sizeof *self);
    self->enabled = true;
    self->roles = roles;
    self->dir = strdup (dir);
    self->allowed = zsys_sprintf ("%s/%s", dir, KD_CURVE_ALLOWED_DIR);
    char path [S_PATH_MAX + 64];
    if (roles & KD_CURVE_SERVER) {
        snprintf (path, sizeof path, "%s/%s", dir, KD_CURVE_SERVER_CERT);
        self->server = s_load_pair (path, err, err_size);
        if (!self->server
        ||  s_check_allowed (self->allowed, &self->allowed_count, err, err_size))
            goto failed;
    }
    if (roles & KD_CURVE_CLIENT) {
        const char *file = s_role_file (identity);
        if (!file) {
            snprintf (err, err_size, "curve: unknown role '%s'", identity);
            goto failed;
        }
        snprintf (path, sizeof path, "%s/%s_secret", dir, file);
        if (strcmp (file, KD_CURVE_CLIENT_CERT) && access (path, F_OK) != 0) {
            kd_warn ("curve: no key of role %s in %s; using the workers' client.cert "
                     "(a keys directory from before roles; run 'kudus keygen' again)", identity, dir);
            file = KD_CURVE_CLIENT_CERT;
        }
        snprintf (path, sizeof path, "%s/%s", dir, file);
        self->client = s_load_pair (path, err, err_size);
        if (!self->client)
            goto failed;
        snprintf (path, sizeof path, "%s/%s", dir, KD_CURVE_SERVER_CERT);
        if (s_load_public (path, self->server_key, err, err_size))
            goto failed;
    }
    return self;
failed:
    kd_curve_destroy (&self);
    return NULL;
}

kd_curve_t *
kd_curve_new (kd_config_t *config, int roles, char *err, size_t err_size)
{
    if (kd_config_bool (config, "curve"))
        return kd_curve_new_as (kd_config_str (config, "keys-dir"), roles, s_identity, err, err_size);
    kd_curve_t *self = (kd_curve_t *) zmalloc (sizeof *self);
    self->roles = roles;
    return self;
}

void
kd_curve_destroy (kd_curve_t **self_p)
{
    assert (self_p);
    kd_curve_t *self = *self_p;
    if (!self)
        return;
    if (self->auth) {
        zactor_destroy (&self->auth);
        s_auth_running = false;
    }
    if (s_process == self)
        s_process = NULL;
    zcert_destroy (&self->server);
    zcert_destroy (&self->client);
    free (self->dir);
    free (self->allowed);
    free (self);
    *self_p = NULL;
}

bool
kd_curve_enabled (kd_curve_t *self)
{
    return self && self->enabled;
}

size_t
kd_curve_allowed_count (kd_curve_t *self)
{
    return self ? self->allowed_count : 0;
}

//  Start zauth with the allowed/ directory as its certificate store.  The
//  store rereads the directory when it changes, so adding or removing a
//  client certificate takes effect at the client's next handshake.
int
kd_curve_start_auth (kd_curve_t *self)
{
    assert (self);
    if (self->enabled && !(self->roles & KD_CURVE_SERVER))
        kd_info ("curve on keys=%s (client only)", self->dir);
    if (!self->enabled || !(self->roles & KD_CURVE_SERVER) || self->auth)
        return 0;
    if (s_auth_running)
        return -1;
    self->auth = zactor_new (zauth, NULL);
    if (!self->auth)
        return -1;
    //  At debug level zauth logs every allowed and denied handshake.
    if (kd_log_level_current >= KD_LOG_DEBUG) {
        zstr_sendx (self->auth, "VERBOSE", NULL);
        zsock_wait (self->auth);
    }
    zstr_sendx (self->auth, "CURVE", self->allowed, NULL);
    zsock_wait (self->auth);
    s_auth_running = true;
    kd_info ("curve on keys=%s allowed_clients=%zu", self->dir, self->allowed_count);
    return 0;
}

int
kd_curve_server (kd_curve_t *self, zsock_t *sock)
{
    if (!kd_curve_enabled (self))
        return 0;
    //  A CURVE server without a ZAP handler would admit any client key.
    assert (self->server && self->auth);
    zsock_set_zap_domain (sock, S_ZAP_DOMAIN);
    zsock_set_curve_server (sock, 1);
    zcert_apply (self->server, sock);
    return 0;
}

int
kd_curve_client (kd_curve_t *self, zsock_t *sock)
{
    if (!kd_curve_enabled (self))
        return 0;
    assert (self->client);
    zcert_apply (self->client, sock);
    zsock_set_curve_serverkey (sock, self->server_key);
    return 0;
}

kd_curve_t *
kd_curve_process (void)
{
    return s_thread ? s_thread : s_process;
}

void
kd_curve_set_process (kd_curve_t *self)
{
    s_process = self;
}

void
kd_curve_set_thread (kd_curve_t *self)
{
    s_thread = self;
}

//  ---------------------------------------------------------------------
//  Key generation

//  Save a key pair as path and path_secret (0600); returns 0 or -1.
static int
s_save_pair (zcert_t *cert, const char *path)
{
    char secret [S_PATH_MAX + 64];
    snprintf (secret, sizeof secret, "%s_secret", path);
    //  zcert_save_secret narrows the umask while it writes; chmod as well,
    //  so the mode does not depend on it.
    if (zcert_save_public (cert, path) != 0 || chmod (path, 0644) != 0)
        return -1;
    if (zcert_save_secret (cert, secret) != 0 || chmod (secret, 0600) != 0)
        return -1;
    return 0;
}

int
kd_curve_keygen (const char *dir, char *err, size_t err_size)
{
    assert (dir);
    if (!zsys_has_curve ()) {
        snprintf (err, err_size, "this libzmq was built without CURVE support");
        return -1;
    }
    if (!*dir || strlen (dir) > 200) {
        snprintf (err, err_size, "keys directory must be 1 to 200 characters");
        return -1;
    }
    char server [S_PATH_MAX], allowed [S_PATH_MAX], path [S_PATH_MAX + 32];
    snprintf (server, sizeof server, "%s/%s", dir, KD_CURVE_SERVER_CERT);
    snprintf (allowed, sizeof allowed, "%s/%s", dir, KD_CURVE_ALLOWED_DIR);
    for (size_t i = 0; i <= S_ROLES; i++) {
        snprintf (path, sizeof path, "%s/%s_secret", dir,
                  i < S_ROLES ? s_role_files [i].file : KD_CURVE_SERVER_CERT);
        if (access (path, F_OK) == 0) {
            snprintf (err, err_size, "%s already exists; remove the old keys first", path);
            return -1;
        }
    }
    if (kd_dir_create (dir, 0755) || kd_dir_create (allowed, 0755)) {
        snprintf (err, err_size, "cannot create %s: %s", allowed, strerror (errno));
        return -1;
    }
    mode_t umask_was = umask (077);
    int rc = -1;
    zcert_t *cert = zcert_new ();
    if (!cert) {
        snprintf (err, err_size, "cannot generate a CURVE key pair");
        goto done;
    }
    zcert_set_meta (cert, "name", "kudus server");
    zcert_set_meta (cert, "created-by", "kudus keygen");
    if (s_save_pair (cert, server)) {
        snprintf (err, err_size, "cannot write %s: %s", server, strerror (errno));
        goto done;
    }
    //  One key pair per role, its role in the metadata, and its public
    //  half in allowed/: the role a service sees is the one issued here.
    for (size_t i = 0; i < S_ROLES; i++) {
        zcert_destroy (&cert);
        cert = zcert_new ();
        if (!cert) {
            snprintf (err, err_size, "cannot generate a CURVE key pair");
            goto done;
        }
        zcert_set_meta (cert, "name", "kudus %s", s_role_files [i].role);
        zcert_set_meta (cert, "created-by", "kudus keygen");
        zcert_set_meta (cert, KD_CURVE_ROLE_META, "%s", s_role_files [i].role);
        snprintf (path, sizeof path, "%s/%s", dir, s_role_files [i].file);
        if (s_save_pair (cert, path)) {
            snprintf (err, err_size, "cannot write %s: %s", path, strerror (errno));
            goto done;
        }
        snprintf (path, sizeof path, "%s/%s", allowed, s_role_files [i].file);
        if (zcert_save_public (cert, path) != 0 || chmod (path, 0644) != 0) {
            snprintf (err, err_size, "cannot write %s: %s", path, strerror (errno));
            goto done;
        }
    }
    rc = 0;
done:
    umask (umask_was);
    zcert_destroy (&cert);
    return rc;
}

char *
kd_curve_keygen_temp (char *err, size_t err_size)
{
    char *dir = kd_temp_dir ("kudus-keys");
    if (!dir) {
        snprintf (err, err_size, "cannot create a temporary keys directory: %s", strerror (errno));
        return NULL;
    }
    if (kd_curve_keygen (dir, err, err_size)) {
        kd_curve_keys_remove (dir);
        free (dir);
        return NULL;
    }
    return dir;
}

void
kd_curve_keys_remove (const char *dir)
{
    char path [S_PATH_MAX + 64];
    const char *server [] = { KD_CURVE_SERVER_CERT, KD_CURVE_SERVER_CERT "_secret" };
    for (size_t i = 0; i < 2; i++) {
        snprintf (path, sizeof path, "%s/%s", dir, server [i]);
        unlink (path);
    }
    for (size_t i = 0; i < S_ROLES; i++) {
        snprintf (path, sizeof path, "%s/%s", dir, s_role_files [i].file);
        unlink (path);
        snprintf (path, sizeof path, "%s/%s_secret", dir, s_role_files [i].file);
        unlink (path);
        snprintf (path, sizeof path, "%s/%s/%s", dir, KD_CURVE_ALLOWED_DIR, s_role_files [i].file);
        unlink (path);
    }
    snprintf (path, sizeof path, "%s/%s", dir, KD_CURVE_ALLOWED_DIR);
    rmdir (path);
    rmdir (dir);
}
