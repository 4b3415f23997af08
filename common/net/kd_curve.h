/*  kd_curve: CURVE encryption and authentication for every network socket.

    One switch, the setting "curve", turns it on for a whole cluster.  The
    keys come from a directory made by `kudus keygen DIR`:

        DIR/server.cert            server public certificate (give to clients)
        DIR/server.cert_secret     server secret certificate (0600, servers only)
        DIR/client.cert[_secret]   the workers' key pair (role worker)
        DIR/ROLE.cert[_secret]     a key pair per other role: scheduler,
                                   shard, monitor, observer (read-only),
                                   evaluator (pulls and reports only)
        DIR/allowed/               public certificates of authorized clients

    Each client certificate carries its role in its metadata ("role").
    zauth hands a certificate's metadata to libzmq with its key, so every
    message a service receives says which key sent it (ZeroMQ's "User-Id")
    and that key's role ("role"); kd_role decides what a role may send.

    A socket that binds is a CURVE server: it uses the server secret key,
    and a ZAP handler (CZMQ's zauth actor) admits only clients whose public
    key is in allowed/.  A socket that connects is a CURVE client: it uses
    the client secret key and the server's public key.  A process that does
    both (a shard binds a ROUTER and connects a DEALER) loads both.

    Without a ZAP handler libzmq admits any CURVE client, so a server
    socket can only be made once kd_curve_start_auth has run; it is a
    programming error otherwise (assert).  kd_service_main loads the
    process's instance and starts zauth before the service binds anything,
    and every call site reaches it through kd_curve_process.  When "curve"
    is off the instance is disabled and every call is a no-op.
*/
#ifndef KD_CURVE_H_INCLUDED
#define KD_CURVE_H_INCLUDED

#include <czmq.h>
#include "kd_config.h"

#ifdef __cplusplus
extern "C" {
#endif

//  Roles for kd_curve_new: which keys the process needs.
#define KD_CURVE_SERVER  0x01       //  binds: server secret key + allowed/
#define KD_CURVE_CLIENT  0x02       //  connects: client secret key + server key

//  File names inside the keys directory.
#define KD_CURVE_SERVER_CERT  "server.cert"
#define KD_CURVE_CLIENT_CERT  "client.cert"
#define KD_CURVE_ALLOWED_DIR  "allowed"
#define KD_CURVE_ROLE_META    "role"    //  certificate metadata naming the role

typedef struct _kd_curve_t kd_curve_t;

//  Security for one process from its config: disabled when "curve" is off,
//  else the keys of `roles` loaded from "keys-dir" and checked.  NULL with
//  a message in err when curve is on and a key is missing, unreadable or
//  malformed, or allowed/ holds no client certificate.  Caller owns return
//  value.
kd_curve_t *
    kd_curve_new (kd_config_t *config, int roles, char *err, size_t err_size);

//  Like kd_curve_new with curve on and keys from dir.  Caller owns return
//  value.
kd_curve_t *
    kd_curve_new_dir (const char *dir, int roles, char *err, size_t err_size);

//  Like kd_curve_new_dir, with the client key of identity: "worker" loads
//  client.cert, another role ROLE.cert (client.cert, with a warning, when a
//  keys directory from before roles has none).
kd_curve_t *
    kd_curve_new_as (const char *dir, int roles, const char *identity,
                     char *err, size_t err_size);

//  Set the identity kd_curve_new loads the client key of (default
//  "worker"); a service sets its own name before kd_curve_new.
void
    kd_curve_set_identity (const char *identity);

//  Destroy (stopping zauth if this instance started it) and null the
//  caller's pointer.
void
    kd_curve_destroy (kd_curve_t **self_p);

//  True when CURVE is on.
bool
    kd_curve_enabled (kd_curve_t *self);

//  Start the ZAP handler that checks clients against allowed/.  Call
//  before any server socket binds; one per process.  No-op when disabled
//  or without the server role.  Returns 0 or -1 (another one runs).
int
    kd_curve_start_auth (kd_curve_t *self);

//  Make a socket a CURVE server; call before zsock_bind.  self NULL or
//  disabled: nothing.  Returns 0.
int
    kd_curve_server (kd_curve_t *self, zsock_t *sock);

//  Make a socket a CURVE client of the server key; call before
//  zsock_connect.  self NULL or disabled: nothing.  Returns 0.
int
    kd_curve_client (kd_curve_t *self, zsock_t *sock);

//  Number of authorized client certificates found in allowed/ at load.
size_t
    kd_curve_allowed_count (kd_curve_t *self);

//  The process's instance, set by kd_service_main (borrowed; NULL if none,
//  which means plain sockets).
kd_curve_t *
    kd_curve_process (void);
void
    kd_curve_set_process (kd_curve_t *self);

//  The instance of the calling thread only (an actor's), which
//  kd_curve_process returns in it instead of the process's; NULL clears it.
void
    kd_curve_set_thread (kd_curve_t *self);

//  Write a server certificate and one client certificate per role
//  (client.cert for workers, ROLE.cert for the others) into dir (created if
//  missing), and the clients' public certificates into dir/allowed/.
//  Secret files get mode 0600.  Refuses to overwrite existing secret
//  certificates.  Returns 0 or -1 with err.
int
    kd_curve_keygen (const char *dir, char *err, size_t err_size);

//  kd_curve_keygen into a fresh private temporary directory; returns its
//  path (caller frees) or NULL with err.
char *
    kd_curve_keygen_temp (char *err, size_t err_size);

//  Delete a keys directory written by kd_curve_keygen (the files it wrote,
//  then the directories if empty).
void
    kd_curve_keys_remove (const char *dir);

#ifdef __cplusplus
}
#endif

#endif
