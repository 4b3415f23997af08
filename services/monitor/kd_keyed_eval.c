/*  kd_keyed_eval: held-out evaluation of a keyed model (see kd_keyed_eval.h).
*/
#include "kd_keyed_eval.h"
#include "kd_sparse_lr.h"

struct _kd_keyed_eval_t {
    char *path;                 //  the held-out file
    size_t max_rows;            //  rows read at most
    kd_sparse_lr_t *rows;       //  the held-out rows, batched whole
    const uint64_t *keys;       //  their distinct keys, sorted (rows owns them)
    size_t n_keys;
    float *values;              //  pulled, one per key
    kd_shardset_t *book;        //  shards (the monitor owns it)
    size_t first [KD_SHARDSET_MAX];     //  shard i's keys: [first, end)
    size_t end [KD_SHARDSET_MAX];
};

//  Read the file (features 0: any index; else rows with an index over it
//  are skipped) and batch every row.  Returns 0, or -1 with err set.
static int
s_read (kd_keyed_eval_t *self, uint64_t features, char *err, size_t err_size)
{
    //  The keys live in the rows' batch: they go with them.
    kd_sparse_lr_destroy (&self->rows);
    self->keys = NULL;
    self->n_keys = 0;
    free (self->values);
    self->values = NULL;
    self->rows = kd_sparse_lr_load (self->path, features, self->max_rows, err, err_size);
    if (!self->rows)
        return -1;
    size_t n = kd_sparse_lr_rows (self->rows);
    uint64_t *all = (uint64_t *) malloc (n * sizeof (uint64_t));
    if (!all) {
        snprintf (err, err_size, "%s: out of memory", self->path);
        return -1;
    }
    for (size_t r = 0; r < n; r++)
        all [r] = r;
    size_t taken = kd_sparse_lr_batch (self->rows, all, n, &self->keys, &self->n_keys);
    free (all);
    if (taken < n) {
        snprintf (err, err_size, "%s: out of memory batching %zu rows", self->path, n);
        return -1;
    }
    self->values = (float *) calloc (self->n_keys, sizeof (float));
    if (!self->values) {
        snprintf (err, err_size, "%s: out of memory for %zu keys", self->path, self->n_keys);
        return -1;
    }
    return 0;
}

kd_keyed_eval_t *
kd_keyed_eval_new (const char *path, size_t max_rows, char *err, size_t err_size)
{
    kd_keyed_eval_t *self = (kd_keyed_eval_t *) calloc (1, sizeof (kd_keyed_eval_t));
    if (!self || !(self->path = strdup (path))) {
        snprintf (err, err_size, "%s: out of memory", path);
        free (self);
        return NULL;
    }
    self->max_rows = max_rows;
    if (s_read (self, 0, err, err_size))
        kd_keyed_eval_destroy (&self);
    return self;
}

void
kd_keyed_eval_destroy (kd_keyed_eval_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kd_keyed_eval_t *self = *self_p;
    kd_sparse_lr_destroy (&self->rows);
    free (self->values);
    free (self->path);
    free (self);
    *self_p = NULL;
}

int
kd_keyed_eval_start (kd_keyed_eval_t *self, uint64_t n_keys, uint64_t dim,
                     kd_shardset_t *book, char *err, size_t err_size)
{
    if (dim != 1) {
        snprintf (err, err_size, "the keyed model has %llu values per key; the held-out "
                  "evaluation scores sparse-lr's one", (unsigned long long) dim);
        return -1;
    }
    //  Features the model does not have (the training file's largest
    //  index sized it) cannot be scored: read again without those rows.
    //  kd_sparse_lr_load reads features 0 as "any index": a model of one
    //  key (the bias alone) scores nothing of a LIBSVM file.
    if (n_keys < 2) {
        snprintf (err, err_size, "the keyed model has %llu keys: no feature to score",
                  (unsigned long long) n_keys);
        return -1;
    }
    if (self->keys [self->n_keys - 1] >= n_keys) {
        size_t before = kd_sparse_lr_rows (self->rows);
        kd_warn ("held-out file has feature %llu, the model %llu keys: reading it without those rows",
                 (unsigned long long) self->keys [self->n_keys - 1], (unsigned long long) n_keys);
        if (s_read (self, n_keys - 1, err, err_size))
            return -1;
        kd_warn ("held-out rows %zu of %zu kept", kd_sparse_lr_rows (self->rows), before);
    }
    self->book = book;
    for (size_t i = 0; i < kd_shardset_size (book); i++) {
        self->first [i] = kd_lower_bound (self->keys, self->n_keys, kd_shardset_lo (book, i));
        self->end [i] = kd_lower_bound (self->keys, self->n_keys, kd_shardset_hi (book, i));
        //  One PULL a shard carries all of its keys: more than a message
        //  may hold would be refused by the shard on every round.
        if (self->end [i] - self->first [i] > KD_MSG_MAX_KEYS) {
            snprintf (err, err_size, "the held-out rows touch %zu keys of shard %zu, more than one "
                      "pull carries (%u): lower eval-rows", self->end [i] - self->first [i], i,
                      (unsigned) KD_MSG_MAX_KEYS);
            self->book = NULL;
            return -1;
        }
    }
    return 0;
}

size_t
kd_keyed_eval_rows (kd_keyed_eval_t *self)
{
    return kd_sparse_lr_rows (self->rows);
}

size_t
kd_keyed_eval_keys (kd_keyed_eval_t *self)
{
    return self->n_keys;
}

float *
kd_keyed_eval_values (kd_keyed_eval_t *self)
{
    return self->values;
}

kd_msg_t *
kd_keyed_eval_request (kd_keyed_eval_t *self, size_t i, uint64_t want)
{
    assert (self->book && i < kd_shardset_size (self->book));
    kd_msg_t *pull = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (pull, KD_F_VERSION, want);
    kd_msg_set_keys (pull, self->keys + self->first [i], self->end [i] - self->first [i]);
    return pull;
}

int
kd_keyed_eval_take (kd_keyed_eval_t *self, size_t i, kd_msg_t *reply, uint64_t want)
{
    assert (self->book && i < kd_shardset_size (self->book));
    size_t count = self->end [i] - self->first [i];
    if (kd_msg_uint (reply, KD_F_VERSION) < want
    ||  kd_msg_data_to_floats (reply, self->values + self->first [i], count)) {
        kd_warn ("evaluation pull: shard %zu answered %llu values at version %llu, expected %zu at %llu",
                 i, (unsigned long long) kd_msg_uint (reply, KD_F_COUNT),
                 (unsigned long long) kd_msg_uint (reply, KD_F_VERSION), count,
                 (unsigned long long) want);
        return -1;
    }
    return 0;
}

int
kd_keyed_eval_score (kd_keyed_eval_t *self, const float *values, double *auc, double *loss,
                     double *accuracy)
{
    return kd_sparse_lr_evaluate (self->rows, values, auc, loss, accuracy);
}
