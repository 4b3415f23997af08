/*  kd_members: the scheduler's membership (see the .h).
*/
#include "kd_members.h"

struct _kd_members_t {
    zhashx_t *by_name;          //  name -> kd_member_t (owns)
    zhashx_t *by_id;            //  routing id key -> kd_member_t (borrows)
    zhashx_t *by_key;           //  registering key -> names it registered (count)
    kd_member_t *workers [KD_MEMBERS_MAX_WORKERS];  //  by rank (borrowed)
    kd_member_t *shards [KD_MEMBERS_MAX_SHARDS];    //  by rank (borrowed)
    kd_member_t *monitor;       //  the monitor last bound, or NULL
    size_t n_shards;            //  shard ranks in use
    size_t max_per_key;         //  names one key may register
};

static void
s_member_destroy (void **item)
{
    kd_member_t *m = (kd_member_t *) *item;
    if (!m)
        return;
    zframe_destroy (&m->routing_id);
    zframe_destroy (&m->via);
    free (m->name);
    free (m->endpoint);
    kd_msg_destroy (&m->held_arrive);
    free (m);
    *item = NULL;
}

const char *
kd_member_role_name (kd_member_role_t role)
{
    return role == KD_MEMBER_WORKER ? "worker" : role == KD_MEMBER_SHARD ? "shard"
         : role == KD_MEMBER_MONITOR ? "monitor" : "evaluator";
}

int
kd_member_role_parse (const char *name)
{
    for (int role = KD_MEMBER_WORKER; role <= KD_MEMBER_EVALUATOR; role++)
        if (!strcmp (name, kd_member_role_name ((kd_member_role_t) role)))
            return role;
    return -1;
}

void
kd_members_id_key (zframe_t *via, zframe_t *id, char *out, size_t size)
{
    size_t at = 0;
    if (via && size > 2) {
        at = kd_hex (zframe_data (via), zframe_size (via), out, size / 2);
        out [at++] = '/';
    }
    kd_hex (zframe_data (id), zframe_size (id), out + at, size - at);
}

kd_members_t *
kd_members_new (size_t n_shards, size_t max_per_key)
{
    if (n_shards > KD_MEMBERS_MAX_SHARDS)
        return NULL;
    kd_members_t *self = (kd_members_t *) zmalloc (sizeof (kd_members_t));
    assert (self);
    self->by_name = zhashx_new ();
    zhashx_set_destructor (self->by_name, s_member_destroy);
    self->by_id = zhashx_new ();
    self->by_key = zhashx_new ();
    self->n_shards = n_shards;
    self->max_per_key = max_per_key;
    return self;
}

void
kd_members_destroy (kd_members_t **self_p)
{
    assert (self_p);
    kd_members_t *self = *self_p;
    if (!self)
        return;
    //  The indexes borrow: they go before the members they point at.
    zhashx_destroy (&self->by_key);
    zhashx_destroy (&self->by_id);
    zhashx_destroy (&self->by_name);
    free (self);
    *self_p = NULL;
}

//  The rank slot a member of role and rank sits in, or NULL: only workers
//  and shards are indexed by rank.
static kd_member_t **
s_slot (kd_members_t *self, kd_member_role_t role, uint64_t rank)
{
    if (role == KD_MEMBER_WORKER && rank < KD_MEMBERS_MAX_WORKERS)
        return &self->workers [rank];
    if (role == KD_MEMBER_SHARD && rank < self->n_shards)
        return &self->shards [rank];
    return NULL;
}

int64_t
kd_members_free_rank (kd_members_t *self, kd_member_role_t role, bool has_hint, uint64_t hint)
{
    assert (self);
    if (role != KD_MEMBER_WORKER && role != KD_MEMBER_SHARD)
        return 0;
    kd_member_t **slot = has_hint ? s_slot (self, role, hint) : NULL;
    if (slot && !*slot)
        return (int64_t) hint;
    size_t n = role == KD_MEMBER_WORKER ? KD_MEMBERS_MAX_WORKERS : self->n_shards;
    for (size_t r = 0; r < n; r++)
        if (!*s_slot (self, role, r))
            return (int64_t) r;
    return -1;
}

size_t
kd_members_key_count (kd_members_t *self, const char *key)
{
    assert (self);
    return (size_t) (uintptr_t) zhashx_lookup (self->by_key, key);
}

kd_member_t *
kd_members_add (kd_members_t *self, const char *name, kd_member_role_t role,
                uint64_t rank, const char *key)
{
    assert (self);
    assert (!zhashx_lookup (self->by_name, name));
    kd_member_t **slot = s_slot (self, role, rank);
    assert (role == KD_MEMBER_MONITOR || role == KD_MEMBER_EVALUATOR || (slot && !*slot));
    size_t names = kd_members_key_count (self, key);
    if (names >= self->max_per_key)
        return NULL;
    zhashx_update (self->by_key, key, (void *) (uintptr_t) (names + 1));
    kd_member_t *m = (kd_member_t *) zmalloc (sizeof *m);
    assert (m);
    snprintf (m->key, sizeof m->key, "%s", key);
    m->name = strdup (name);
    assert (m->name);
    m->role = role;
    m->rank = rank;
    zhashx_insert (self->by_name, name, m);
    if (slot)
        *slot = m;
    return m;
}

//  Forget a member's routing id in the id index.  Two names registered
//  from one connection share an id, and the index holds the first: the
//  entry is removed only when it is this member's.
static void
s_unbind (kd_members_t *self, kd_member_t *m)
{
    if (m->routing_id && zhashx_lookup (self->by_id, m->id_hex) == m)
        zhashx_delete (self->by_id, m->id_hex);
}

void
kd_members_remove (kd_members_t *self, kd_member_t **member_p)
{
    assert (self && member_p && *member_p);
    kd_member_t *m = *member_p;
    kd_member_t **slot = s_slot (self, m->role, m->rank);
    if (slot && *slot == m)
        *slot = NULL;
    if (self->monitor == m)
        self->monitor = NULL;
    s_unbind (self, m);
    size_t names = kd_members_key_count (self, m->key);
    if (names > 1)
        zhashx_update (self->by_key, m->key, (void *) (uintptr_t) (names - 1));
    else
        zhashx_delete (self->by_key, m->key);
    zhashx_delete (self->by_name, m->name);
    *member_p = NULL;
}

void
kd_members_bind (kd_members_t *self, kd_member_t *m, zframe_t *via, zframe_t *id)
{
    assert (self && m && id);
    s_unbind (self, m);
    zframe_destroy (&m->routing_id);
    m->routing_id = zframe_dup (id);
    zframe_destroy (&m->via);
    m->via = via ? zframe_dup (via) : NULL;
    kd_members_id_key (via, id, m->id_hex, sizeof m->id_hex);
    zhashx_insert (self->by_id, m->id_hex, m);
    if (m->role == KD_MEMBER_MONITOR)
        self->monitor = m;
}

kd_member_t *
kd_members_find (kd_members_t *self, const char *name)
{
    assert (self);
    return (kd_member_t *) zhashx_lookup (self->by_name, name);
}

kd_member_t *
kd_members_find_id (kd_members_t *self, const char *id_key)
{
    assert (self);
    return (kd_member_t *) zhashx_lookup (self->by_id, id_key);
}

kd_member_t *
kd_members_worker (kd_members_t *self, uint64_t rank)
{
    assert (self);
    return rank < KD_MEMBERS_MAX_WORKERS ? self->workers [rank] : NULL;
}

kd_member_t *
kd_members_shard (kd_members_t *self, uint64_t rank)
{
    assert (self);
    return rank < KD_MEMBERS_MAX_SHARDS ? self->shards [rank] : NULL;
}

kd_member_t *
kd_members_monitor (kd_members_t *self)
{
    assert (self);
    return self->monitor;
}

size_t
kd_members_live (kd_members_t *self, kd_member_role_t role)
{
    size_t n = 0;
    for (kd_member_t *m = kd_members_first (self); m; m = kd_members_next (self))
        if (m->alive && m->role == role)
            n++;
    return n;
}

kd_member_t *
kd_members_first (kd_members_t *self)
{
    assert (self);
    return (kd_member_t *) zhashx_first (self->by_name);
}

kd_member_t *
kd_members_next (kd_members_t *self)
{
    assert (self);
    return (kd_member_t *) zhashx_next (self->by_name);
}

zlistx_t *
kd_members_silent (kd_members_t *self, uint64_t now_ms, uint64_t limit_ms)
{
    zlistx_t *silent = zlistx_new ();
    assert (silent);
    for (kd_member_t *m = kd_members_first (self); m; m = kd_members_next (self))
        if (m->alive && now_ms - m->last_seen > limit_ms)
            zlistx_add_end (silent, m);
    return silent;
}

size_t
kd_members_size (kd_members_t *self)
{
    assert (self);
    return zhashx_size (self->by_name);
}
