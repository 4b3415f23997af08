/*  kd_sparse: a shard's sparse tensor (see kd_sparse.h).
*/
#include "kd_sparse.h"
#include "kd_util.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define S_MIN_SLOTS  1024               //  table slots at first
#define S_MAX_ROWS   0xfffffffeu        //  rows are numbered in 32 bits
#define S_AHEAD      8                  //  keys a pull prefetches ahead
_Static_assert ((S_AHEAD & (S_AHEAD - 1)) == 0, "S_AHEAD indexes a ring by a mask");
#define S_MUL1       0x9E3779B97F4A7C15ULL  //  the home hash's multipliers, odd
#define S_MUL2       0xD6E8FEB86659FD93ULL

typedef struct {
    uint64_t key;
    uint32_t row;                       //  row + 1; 0 = free slot
} s_slot_t;

struct _kd_sparse_t {
    size_t dim;                         //  floats per row
    kd_optimizer_opts_t opts;           //  the update rule
    size_t n_state;                     //  its state buffers per row
    size_t stride;                      //  floats per row in the arena: (1 + n_state) dim
    double init_scale;                  //  initial values' range (0: zeros)
    uint64_t seed;                      //  of the initial values
    uint64_t t;                         //  steps taken
    uint64_t samples;                   //  samples applied before the next step
    s_slot_t *slots;                    //  the table
    size_t n_slots;                     //  a power of two
    unsigned shift;                     //  64 - log2 (n_slots): the home's bits
    float *arena;                       //  rows, stride floats each
    uint64_t *keys;                     //  key of each row, for iteration
    size_t n_rows, cap_rows;
};

kd_sparse_t *
kd_sparse_new (size_t dim, const kd_optimizer_opts_t *opts, double init_scale, uint64_t seed)
{
    char err [128];
    if (dim == 0 || !opts || kd_optimizer_opts_check (opts, err, sizeof err) || !(init_scale >= 0))
        return NULL;
    kd_sparse_t *self = (kd_sparse_t *) calloc (1, sizeof (kd_sparse_t));
    if (!self)
        return NULL;
    self->dim = dim;
    self->opts = *opts;
    self->n_state = kd_optimizer_state_count_of (opts);
    self->stride = (1 + self->n_state) * dim;
    self->init_scale = init_scale;
    self->seed = seed;
    self->n_slots = S_MIN_SLOTS;
    self->shift = 64 - (unsigned) __builtin_ctzll (S_MIN_SLOTS);
    self->slots = (s_slot_t *) calloc (self->n_slots, sizeof (s_slot_t));
    if (!self->slots) {
        free (self);
        return NULL;
    }
    return self;
}

void
kd_sparse_destroy (kd_sparse_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kd_sparse_t *self = *self_p;
    free (self->slots);
    free (self->arena);
    free (self->keys);
    free (self);
    *self_p = NULL;
}

//  A key's home slot: the top bits of a multiply, fold, multiply hash.
//  Half the steps of a full mixer (kd_mix64), which the pull path paid
//  for every key; a lone multiply (Fibonacci hashing) would be cheaper
//  still but piles keys strided by 2^14 to 2^20 into long probe runs,
//  which the fold breaks up (the average probe stays at 1.5 at load 1/2
//  for strides 2 to 2^32 and for random keys).
static inline size_t
s_home (const kd_sparse_t *self, uint64_t key)
{
    uint64_t h = key * S_MUL1;
    h ^= h >> 32;
    return (size_t) ((h * S_MUL2) >> self->shift);
}

//  The slot of key, or the free slot that ends its probe, starting at
//  its home slot i.
static s_slot_t *
s_probe_from (kd_sparse_t *self, uint64_t key, size_t i)
{
    while (self->slots [i].row && self->slots [i].key != key)
        i = (i + 1) & (self->n_slots - 1);
    return &self->slots [i];
}

//  The slot of key, or the free slot that ends its probe.
static s_slot_t *
s_probe (kd_sparse_t *self, uint64_t key)
{
    return s_probe_from (self, key, s_home (self, key));
}

//  Initial values of a key's row.
static void
s_init_row (kd_sparse_t *self, uint64_t key, float *out)
{
    if (self->init_scale == 0) {
        memset (out, 0, self->dim * sizeof (float));
        return;
    }
    uint64_t state = kd_mix64 (self->seed ^ kd_mix64 (key));
    for (size_t j = 0; j < self->dim; j++) {
        double u = (double) (kd_splitmix64 (&state) >> 11) * 0x1.0p-53;
        out [j] = (float) ((2 * u - 1) * self->init_scale);
    }
}

//  Double the table, rehashing every key.
static int
s_grow_table (kd_sparse_t *self)
{
    size_t n = self->n_slots * 2;
    s_slot_t *slots = (s_slot_t *) calloc (n, sizeof (s_slot_t));
    if (!slots)
        return -1;
    s_slot_t *old = self->slots;
    size_t n_old = self->n_slots;
    self->slots = slots;
    self->n_slots = n;
    self->shift--;
    for (size_t i = 0; i < n_old; i++)
        if (old [i].row)
            *s_probe (self, old [i].key) = old [i];
    free (old);
    return 0;
}

//  Room for `more` rows, in the arena and under the table's load of 1/2.
static int
s_reserve (kd_sparse_t *self, size_t more)
{
    if (self->n_rows + more > S_MAX_ROWS)
        return -1;
    while ((self->n_rows + more) * 2 > self->n_slots)
        if (s_grow_table (self))
            return -1;
    if (self->n_rows + more > self->cap_rows) {
        size_t cap = self->cap_rows ? self->cap_rows : 256;
        while (cap < self->n_rows + more)
            cap *= 2;
        float *arena = (float *) realloc (self->arena, cap * self->stride * sizeof (float));
        if (!arena)
            return -1;
        self->arena = arena;
        uint64_t *keys = (uint64_t *) realloc (self->keys, cap * sizeof (uint64_t));
        if (!keys)
            return -1;
        self->keys = keys;
        self->cap_rows = cap;
    }
    return 0;
}

//  One key of a pull: probe from its home slot and copy its row (or its
//  initial values) to `to`.
static inline __attribute__ ((always_inline)) void
s_pull_one (kd_sparse_t *self, const s_slot_t *slots, size_t mask, uint64_t key, size_t at,
            float *to, size_t dim)
{
    while (slots [at].row && slots [at].key != key)
        at = (at + 1) & mask;
    uint32_t row = slots [at].row;
    if (!row)
        s_init_row (self, key, to);
    else
    if (dim == 1)
        *to = self->arena [(size_t) (row - 1) * self->stride];
    else
        memcpy (to, self->arena + (size_t) (row - 1) * self->stride, dim * sizeof (float));
}

//  The pull's loop, inlined twice: with dim 1 (a keyed linear model) the
//  compiler drops the row copy's loop and the multiplies by dim.
static inline __attribute__ ((always_inline)) void
s_pull_rows (kd_sparse_t *self, const uint64_t *keys, size_t n, float *out, size_t dim)
{
    const s_slot_t *slots = self->slots;
    const size_t mask = self->n_slots - 1;
    //  The slot a few keys ahead is fetched while this one is probed: a
    //  pull of scattered keys is otherwise one cache miss after another.
    //  Each key's home is hashed once, for its prefetch, and kept for its
    //  probe S_AHEAD keys later.
    size_t home [S_AHEAD];
    size_t ahead = n < S_AHEAD ? n : S_AHEAD;
    for (size_t i = 0; i < ahead; i++) {
        home [i] = s_home (self, keys [i]);
        __builtin_prefetch (&slots [home [i]]);
    }
    size_t i = 0;
    for (; i + S_AHEAD < n; i++) {
        size_t at = home [i & (S_AHEAD - 1)];
        size_t next = s_home (self, keys [i + S_AHEAD]);
        home [i & (S_AHEAD - 1)] = next;
        __builtin_prefetch (&slots [next]);
        s_pull_one (self, slots, mask, keys [i], at, out + i * dim, dim);
    }
    for (; i < n; i++)
        s_pull_one (self, slots, mask, keys [i], home [i & (S_AHEAD - 1)], out + i * dim, dim);
}

void
kd_sparse_pull (kd_sparse_t *self, const uint64_t *keys, size_t n, float *out)
{
    assert (self && (n == 0 || (keys && out)));
    if (self->dim == 1)
        s_pull_rows (self, keys, n, out, 1);
    else
        s_pull_rows (self, keys, n, out, self->dim);
}

int
kd_sparse_step (kd_sparse_t *self, const uint64_t *keys, size_t n, const float *g)
{
    assert (self && (n == 0 || (keys && g)));
    //  Room for every key first, so a failure applies nothing.
    if (s_reserve (self, n))
        return -1;
    self->t++;
    for (size_t i = 0; i < n; i++) {
        s_slot_t *slot = s_probe (self, keys [i]);
        if (!slot->row) {
            size_t row = self->n_rows++;
            float *values = self->arena + row * self->stride;
            s_init_row (self, keys [i], values);
            memset (values + self->dim, 0, self->n_state * self->dim * sizeof (float));
            self->keys [row] = keys [i];
            slot->key = keys [i];
            slot->row = (uint32_t) row + 1;
        }
        float *values = self->arena + (size_t) (slot->row - 1) * self->stride;
        float *state [KD_OPTIMIZER_MAX_STATE];
        for (size_t s = 0; s < self->n_state; s++)
            state [s] = values + (1 + s) * self->dim;
        kd_optimizer_apply (&self->opts, self->t, self->samples, values, state, g + i * self->dim, self->dim);
    }
    return 0;
}

size_t
kd_sparse_rows (kd_sparse_t *self)
{
    assert (self);
    return self->n_rows;
}

void
kd_sparse_set_samples (kd_sparse_t *self, uint64_t samples)
{
    assert (self);
    self->samples = samples;
}

uint64_t
kd_sparse_steps (kd_sparse_t *self)
{
    assert (self);
    return self->t;
}

size_t
kd_sparse_bytes (kd_sparse_t *self)
{
    assert (self);
    return self->cap_rows * (self->stride * sizeof (float) + sizeof (uint64_t))
         + self->n_slots * sizeof (s_slot_t);
}

const float *
kd_sparse_row (kd_sparse_t *self, size_t i, uint64_t *key)
{
    assert (self);
    if (i >= self->n_rows)
        return NULL;
    if (key)
        *key = self->keys [i];
    return self->arena + i * self->stride;
}

const uint64_t *
kd_sparse_keys (kd_sparse_t *self)
{
    assert (self);
    return self->keys;
}

const float *
kd_sparse_arena (kd_sparse_t *self)
{
    assert (self);
    return self->arena;
}

size_t
kd_sparse_stride (kd_sparse_t *self)
{
    assert (self);
    return self->stride;
}

int
kd_sparse_load (kd_sparse_t *self, const uint64_t *keys, const float *rows, size_t n, uint64_t steps)
{
    assert (self && (n == 0 || (keys && rows)));
    //  Into an empty table of its own first, so a failure changes nothing.
    kd_sparse_t *fresh = kd_sparse_new (self->dim, &self->opts, self->init_scale, self->seed);
    if (!fresh || s_reserve (fresh, n)) {
        kd_sparse_destroy (&fresh);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        s_slot_t *slot = s_probe (fresh, keys [i]);
        if (slot->row) {
            kd_sparse_destroy (&fresh);
            return -1;
        }
        memcpy (fresh->arena + i * fresh->stride, rows + i * fresh->stride, fresh->stride * sizeof (float));
        fresh->keys [i] = keys [i];
        slot->key = keys [i];
        slot->row = (uint32_t) i + 1;
        fresh->n_rows++;
    }
    fresh->t = steps;
    //  Swap the contents, then free the old ones with the shell.
    kd_sparse_t old = *self;
    *self = *fresh;
    *fresh = old;
    kd_sparse_destroy (&fresh);
    return 0;
}
