/*  kd_aggregators: the scheduler's side of the barrier tree (see the .h).
*/
#include "kd_aggregators.h"
#include "kd_log.h"
#include "kd_util.h"

#define S_MAX_AGGREGATORS   4096        //  forget idle ones past this

typedef struct {
    zframe_t *id;               //  the aggregator's routing id
    kd_bundle_t *bundle;        //  what waits to go to it
} s_agg_t;

struct _kd_aggregators_t {
    zsock_t *router;            //  borrowed
    zhashx_t *by_id;            //  id hex -> s_agg_t (owns)
    kd_aggregators_stats_t stats;
    size_t pending;             //  messages queued since the last flush
};

static void
s_agg_destroy (void **item)
{
    s_agg_t *a = (s_agg_t *) *item;
    zframe_destroy (&a->id);
    kd_bundle_destroy (&a->bundle);
    free (a);
    *item = NULL;
}

kd_aggregators_t *
kd_aggregators_new (zsock_t *router)
{
    kd_aggregators_t *self = (kd_aggregators_t *) zmalloc (sizeof (kd_aggregators_t));
    assert (self);
    self->router = router;
    self->by_id = zhashx_new ();
    zhashx_set_destructor (self->by_id, s_agg_destroy);
    return self;
}

void
kd_aggregators_destroy (kd_aggregators_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        zhashx_destroy (&(*self_p)->by_id);
        free (*self_p);
        *self_p = NULL;
    }
}

static s_agg_t *
s_lookup (kd_aggregators_t *self, zframe_t *via)
{
    char hex [520];
    kd_hex (zframe_data (via), zframe_size (via), hex, sizeof hex);
    s_agg_t *a = (s_agg_t *) zhashx_lookup (self->by_id, hex);
    if (!a) {
        //  Aggregators that went away leave idle entries.  What this turn
        //  queued goes out first, so dropping them all loses nothing.
        if (zhashx_size (self->by_id) >= S_MAX_AGGREGATORS) {
            self->pending = 1;
            kd_aggregators_flush (self);
            zhashx_purge (self->by_id);
        }
        a = (s_agg_t *) zmalloc (sizeof (s_agg_t));
        assert (a);
        a->id = zframe_dup (via);
        a->bundle = kd_bundle_new ();
        zhashx_insert (self->by_id, hex, a);
    }
    return a;
}

static void
s_send (kd_aggregators_t *self, s_agg_t *a)
{
    size_t items = kd_bundle_items (a->bundle);
    kd_msg_t *relay = kd_bundle_take (a->bundle);
    if (!relay)
        return;
    kd_msg_set_routing_id (relay, a->id);
    if (kd_msg_send (&relay, self->router) == 0) {
        self->stats.relays_out++;
        self->stats.items_out += items;
    }
}

void
kd_aggregators_send (kd_aggregators_t *self, zframe_t *via, zframe_t *id, kd_msg_t **msg_p)
{
    assert (self);
    assert (msg_p && *msg_p);
    s_agg_t *a = s_lookup (self, via);
    self->pending++;
    if (kd_bundle_add_msg (a->bundle, id, NULL, *msg_p) != 0) {
        //  Full: send what is queued and start a new bundle.
        s_send (self, a);
        if (kd_bundle_add_msg (a->bundle, id, NULL, *msg_p) != 0)
            kd_warn ("cannot relay %s: it has a data frame, or is too large for a RELAY",
                     kd_msg_type_name (kd_msg_type (*msg_p)));
    }
    kd_msg_destroy (msg_p);
}

void
kd_aggregators_flush (kd_aggregators_t *self)
{
    assert (self);
    if (self->pending == 0)
        return;
    self->pending = 0;
    for (s_agg_t *a = (s_agg_t *) zhashx_first (self->by_id); a; a = (s_agg_t *) zhashx_next (self->by_id))
        s_send (self, a);
}

kd_aggregators_stats_t *
kd_aggregators_stats (kd_aggregators_t *self)
{
    assert (self);
    return &self->stats;
}

size_t
kd_aggregators_size (kd_aggregators_t *self)
{
    assert (self);
    return zhashx_size (self->by_id);
}

void
kd_aggregators_received (kd_aggregators_t *self, zframe_t *via, size_t items)
{
    assert (self);
    s_lookup (self, via);
    self->stats.relays_in++;
    self->stats.items_in += items;
}
