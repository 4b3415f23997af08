/*  kd_shardset: the address book of the shards (see kd_shardset.h).
*/
#include "kd_shardset.h"
#include "kd_util.h"

typedef struct {
    zsock_t *sock;              //  DEALER to the shard
    char *endpoint;             //  its advertised endpoint
    uint64_t lo, hi;            //  its key range
} s_entry_t;

struct _kd_shardset_t {
    s_entry_t shards [KD_SHARDSET_MAX];     //  the book
    size_t n;                   //  entries in use
    int64_t max_msg;            //  socket limit, for rerouted sockets
    kd_curve_t *curve;          //  keys, for rerouted sockets (borrowed)
};

kd_shardset_t *
kd_shardset_new (kd_msg_t *start, size_t n_params, int64_t max_msg, kd_curve_t *curve,
                 char *err, size_t err_size)
{
    size_t n = 0, nlo = 0, nhi = 0;
    const char **endpoints = kd_msg_strs (start, KD_F_ENDPOINTS, &n);
    const uint64_t *los = kd_msg_uints (start, KD_F_LOS, &nlo);
    const uint64_t *his = kd_msg_uints (start, KD_F_HIS, &nhi);
    if (n == 0 || n > KD_SHARDSET_MAX || n != nlo || n != nhi
    ||  (n_params > 0 && his [n - 1] != n_params)) {
        snprintf (err, err_size, "bad address book: %zu shards for a model of %zu keys", n, n_params);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (los [i] >= his [i] || los [i] != (i == 0 ? 0 : his [i - 1])) {
            snprintf (err, err_size, "bad address book: shard ranges do not tile the model");
            return NULL;
        }
    kd_shardset_t *self = (kd_shardset_t *) zmalloc (sizeof *self);
    self->max_msg = max_msg;
    self->curve = curve;
    for (size_t i = 0; i < n; i++) {
        s_entry_t *s = &self->shards [i];
        s->sock = zsock_new (ZMQ_DEALER);
        s->endpoint = strdup (endpoints [i]);
        s->lo = los [i];
        s->hi = his [i];
        self->n = i + 1;
        kd_socket_harden (s->sock, max_msg);
        kd_curve_client (curve ? curve : kd_curve_process (), s->sock);
        if (zsock_connect (s->sock, "%s", endpoints [i]) != 0) {
            snprintf (err, err_size, "cannot connect to shard endpoint=%s", endpoints [i]);
            kd_shardset_destroy (&self);
            return NULL;
        }
    }
    return self;
}

void
kd_shardset_destroy (kd_shardset_t **self_p)
{
    assert (self_p);
    kd_shardset_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->n; i++) {
        zsock_destroy (&self->shards [i].sock);
        free (self->shards [i].endpoint);
    }
    free (self);
    *self_p = NULL;
}

int
kd_shardset_reroute (kd_shardset_t *self, size_t i, const char *endpoint)
{
    assert (self && endpoint);
    if (i >= self->n || !*endpoint)
        return -1;
    s_entry_t *s = &self->shards [i];
    if (!strcmp (s->endpoint, endpoint))
        return 0;
    //  A new socket: requests queued for the old address must not reach a
    //  replica that is no longer the primary.
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    kd_socket_harden (sock, self->max_msg);
    kd_curve_client (self->curve ? self->curve : kd_curve_process (), sock);
    if (zsock_connect (sock, "%s", endpoint) != 0) {
        zsock_destroy (&sock);
        return -1;
    }
    zsock_set_linger (s->sock, 0);
    zsock_destroy (&s->sock);
    s->sock = sock;
    free (s->endpoint);
    s->endpoint = strdup (endpoint);
    return 1;
}

size_t
kd_shardset_size (kd_shardset_t *self)
{
    assert (self);
    return self->n;
}

size_t
kd_shardset_params (kd_shardset_t *self)
{
    assert (self);
    return (size_t) self->shards [self->n - 1].hi;
}

zsock_t *
kd_shardset_socket (kd_shardset_t *self, size_t i)
{
    assert (self && i < self->n);
    return self->shards [i].sock;
}

const char *
kd_shardset_endpoint (kd_shardset_t *self, size_t i)
{
    assert (self && i < self->n);
    return self->shards [i].endpoint;
}

uint64_t
kd_shardset_lo (kd_shardset_t *self, size_t i)
{
    assert (self && i < self->n);
    return self->shards [i].lo;
}

uint64_t
kd_shardset_hi (kd_shardset_t *self, size_t i)
{
    assert (self && i < self->n);
    return self->shards [i].hi;
}

int
kd_shardset_take_pull (kd_shardset_t *self, size_t i, kd_msg_t *reply, uint64_t min_version,
                       float *params)
{
    assert (self && i < self->n && reply && params);
    s_entry_t *s = &self->shards [i];
    size_t count = (size_t) (s->hi - s->lo);
    //  fp32 is copied; fp16 and bf16 are converted on the way.
    if (kd_msg_type (reply) != KD_MSG_PULL_OK
    ||  kd_msg_uint (reply, KD_F_VERSION) < min_version
    ||  kd_msg_uint (reply, KD_F_LO) != s->lo || kd_msg_uint (reply, KD_F_COUNT) != count)
        return -1;
    return kd_msg_data_to_floats (reply, params + s->lo, count);
}
