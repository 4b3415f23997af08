/*  kd_bundle: many peers' control messages in one RELAY (see kd_bundle.h).
*/
#include "kd_bundle.h"

struct _kd_bundle_t {
    byte *data;                 //  items, back to back
    size_t size;                //  bytes used
    size_t capacity;            //  bytes allocated
    size_t items;               //  items held
};

kd_bundle_t *
kd_bundle_new (void)
{
    kd_bundle_t *self = (kd_bundle_t *) zmalloc (sizeof (kd_bundle_t));
    assert (self);
    return self;
}

void
kd_bundle_destroy (kd_bundle_t **self_p)
{
    assert (self_p);
    if (*self_p) {
        free ((*self_p)->data);
        free (*self_p);
        *self_p = NULL;
    }
}

//  Room for bytes more, growing by doubling.
static int
s_reserve (kd_bundle_t *self, size_t bytes)
{
    if (self->size + bytes <= self->capacity)
        return 0;
    size_t capacity = self->capacity ? self->capacity : 4096;
    while (capacity < self->size + bytes)
        capacity *= 2;
    byte *data = (byte *) realloc (self->data, capacity);
    if (!data)
        return -1;
    self->data = data;
    self->capacity = capacity;
    return 0;
}

static void
s_put (kd_bundle_t *self, const void *bytes, size_t size)
{
    if (size)
        memcpy (self->data + self->size, bytes, size);
    self->size += size;
}

//  A short string as u8 length + bytes.
static void
s_put_str (kd_bundle_t *self, const char *text, size_t size)
{
    byte len = (byte) size;
    s_put (self, &len, 1);
    s_put (self, text, size);
}

int
kd_bundle_add (kd_bundle_t *self, const kd_bundle_item_t *item)
{
    assert (self);
    assert (item);
    size_t role = strnlen (item->src.role, sizeof item->src.role);
    size_t user = strnlen (item->src.user, sizeof item->src.user);
    size_t address = strnlen (item->src.address, sizeof item->src.address);
    if (!item->id || item->id_size == 0 || item->id_size > 255
    ||  !item->msg || item->msg_size == 0 || item->msg_size > KD_BUNDLE_MAX_MSG
    ||  role >= sizeof item->src.role || user >= sizeof item->src.user
    ||  address >= sizeof item->src.address)
        return -1;
    size_t bytes = 4 + item->id_size + role + user + address + 4 + item->msg_size;
    if (self->items >= KD_BUNDLE_MAX_ITEMS || self->size + bytes + 3 > KD_BUNDLE_MAX_BYTES
    ||  s_reserve (self, bytes + 3))
        return -1;
    s_put_str (self, (const char *) item->id, item->id_size);
    s_put_str (self, item->src.role, role);
    s_put_str (self, item->src.user, user);
    s_put_str (self, item->src.address, address);
    uint32_t len = (uint32_t) item->msg_size;
    byte le [4] = { (byte) len, (byte) (len >> 8), (byte) (len >> 16), (byte) (len >> 24) };
    s_put (self, le, 4);
    s_put (self, item->msg, item->msg_size);
    self->items++;
    return 0;
}

int
kd_bundle_add_msg (kd_bundle_t *self, zframe_t *id, const kd_msg_source_t *src, kd_msg_t *msg)
{
    assert (self);
    assert (msg);
    if (!id || kd_msg_data (msg))
        return -1;
    //  The item carries the routing id: the header is the frame after the
    //  message's own routing id, if it has one.
    zmsg_t *z = NULL;
    int rc = kd_msg_encode (msg, &z);
    size_t skip = kd_msg_routing_id (msg) ? 1 : 0;
    if (rc != 0 || zmsg_size (z) != 1 + skip) {
        zmsg_destroy (&z);
        return -1;
    }
    zframe_t *header = zmsg_first (z);
    if (skip)
        header = zmsg_next (z);
    kd_bundle_item_t item = {
        .id = zframe_data (id), .id_size = zframe_size (id),
        .msg = zframe_data (header), .msg_size = zframe_size (header)
    };
    if (src)
        item.src = *src;
    rc = kd_bundle_add (self, &item);
    zmsg_destroy (&z);
    return rc;
}

size_t
kd_bundle_items (kd_bundle_t *self)
{
    assert (self);
    return self->items;
}

kd_msg_t *
kd_bundle_take (kd_bundle_t *self)
{
    assert (self);
    if (self->items == 0)
        return NULL;
    //  s_reserve kept 3 spare bytes for the padding.
    while (self->size % 4)
        self->data [self->size++] = 0;
    zframe_t *frame = zframe_new (self->data, self->size);
    assert (frame);
    kd_msg_t *msg = kd_msg_new (KD_MSG_RELAY);
    kd_msg_set_uint (msg, KD_F_ITEMS, self->items);
    kd_msg_set_data (msg, &frame);
    self->size = 0;
    self->items = 0;
    return msg;
}

static int
s_fail (char *reason, size_t reason_size, const char *text, size_t index)
{
    if (reason && reason_size)
        snprintf (reason, reason_size, "RELAY item %zu: %s", index, text);
    return -2;
}

//  A u8-length string into out (size bytes, NUL-terminated); -1 when it does
//  not fit the bytes left or out, or holds a NUL.
static int
s_get_str (const byte *data, size_t size, size_t *at, char *out, size_t out_size)
{
    if (*at >= size)
        return -1;
    size_t len = data [*at];
    if (len >= out_size || len > size - *at - 1)
        return -1;
    if (memchr (data + *at + 1, 0, len))
        return -1;
    memcpy (out, data + *at + 1, len);
    out [len] = 0;
    *at += 1 + len;
    return 0;
}

int
kd_bundle_next (kd_msg_t *relay, size_t *offset, size_t *index, kd_bundle_item_t *item,
                char *reason, size_t reason_size)
{
    assert (relay);
    assert (offset && index && item);
    zframe_t *frame = kd_msg_data (relay);
    const byte *data = frame ? zframe_data (frame) : NULL;
    size_t size = frame ? zframe_size (frame) : 0;
    uint64_t items = kd_msg_uint (relay, KD_F_ITEMS);
    size_t at = *offset;
    if (kd_msg_type (relay) != KD_MSG_RELAY || items > KD_BUNDLE_MAX_ITEMS || at > size)
        return s_fail (reason, reason_size, "not a RELAY, or more items than allowed", *index);
    if (*index == items) {
        //  Only padding may follow the last item.
        if (size - at > 3)
            return s_fail (reason, reason_size, "bytes after the last item", *index);
        for (size_t i = at; i < size; i++)
            if (data [i])
                return s_fail (reason, reason_size, "padding is not zero", *index);
        return 1;
    }
    memset (item, 0, sizeof *item);
    item->src.fd = -1;
    if (at >= size)
        return s_fail (reason, reason_size, "fewer items than \"items\" says", *index);
    item->id_size = data [at];
    if (item->id_size == 0 || item->id_size > size - at - 1)
        return s_fail (reason, reason_size, "routing id length out of bounds", *index);
    item->id = data + at + 1;
    at += 1 + item->id_size;
    if (s_get_str (data, size, &at, item->src.role, sizeof item->src.role)
    ||  s_get_str (data, size, &at, item->src.user, sizeof item->src.user)
    ||  s_get_str (data, size, &at, item->src.address, sizeof item->src.address))
        return s_fail (reason, reason_size, "role, user or address out of bounds", *index);
    if (size - at < 4)
        return s_fail (reason, reason_size, "message length cut short", *index);
    size_t len = (size_t) data [at] | (size_t) data [at + 1] << 8
               | (size_t) data [at + 2] << 16 | (size_t) data [at + 3] << 24;
    at += 4;
    if (len == 0 || len > KD_BUNDLE_MAX_MSG || len > size - at)
        return s_fail (reason, reason_size, "message length out of bounds", *index);
    item->msg = data + at;
    item->msg_size = len;
    at += len;
    *offset = at;
    (*index)++;
    return 0;
}

int
kd_bundle_decode (const kd_bundle_item_t *item, kd_msg_t **out, kd_msg_err_t *err)
{
    assert (item);
    zmsg_t *z = zmsg_new ();
    zmsg_addmem (z, item->id, item->id_size);
    zmsg_addmem (z, item->msg, item->msg_size);
    return kd_msg_decode (&z, true, out, NULL, err);
}
