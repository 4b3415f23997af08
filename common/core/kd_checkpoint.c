/*  kd_checkpoint: durable snapshots of one shard's key range (see
    kd_checkpoint.h).
*/
#include "kd_checkpoint.h"
#include "kd_log.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#if defined (__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#   error "checkpoints store float32 arrays in host order, which must be little-endian"
#endif

#define S_MAGIC         "KDCKPT02"
#define S_MAGIC_V1      "KDCKPT01"      //  read only: n_state 1, no optimizer fields
#define S_MAX_FILES     4096            //  checkpoints listed in one directory
#define S_PREFIX        "ckpt-"
#define S_SUFFIX        ".kdc"

//  Header field offsets, after the 8-byte magic.
enum {
    S_OFF_VERSION = 8, S_OFF_SAMPLES = 16, S_OFF_RANK = 24, S_OFF_LO = 32,
    S_OFF_HI = 40, S_OFF_N_PARAMS = 48, S_OFF_KIND = 56, S_OFF_HIDDEN = 60,
    S_OFF_TS = 64, S_OFF_N_STATE = 72, S_OFF_OPT_KIND = 76, S_OFF_OPT_STEPS = 80,
    S_OFF_KEY_DIM = 88, S_OFF_KEY_ROWS = 96
};

#define S_MAX_KEY_DIM   65536           //  values per key of a keyed range at most

static void
s_put64 (uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p [i] = (uint8_t) (v >> (8 * i));
}

static void
s_put32 (uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p [i] = (uint8_t) (v >> (8 * i));
}

static uint64_t
s_get64 (const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p [i];
    return v;
}

static uint32_t
s_get32 (const uint8_t *p)
{
    return (uint32_t) p [0] | (uint32_t) p [1] << 8 | (uint32_t) p [2] << 16
         | (uint32_t) p [3] << 24;
}

//  CRC-32 of a buffer of any size (zlib takes 32-bit lengths).
static uLong
s_crc (uLong crc, const void *data, size_t size)
{
    const Bytef *p = (const Bytef *) data;
    while (size > 0) {
        uInt chunk = size > (1u << 30) ? (1u << 30) : (uInt) size;
        crc = crc32 (crc, p, chunk);
        p += chunk;
        size -= chunk;
    }
    return crc;
}

//  Write all of a buffer, through short writes and EINTR.
//  qsort order of uint64 keys.
static int
s_compare_u64 (const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}

static int
s_write_all (int fd, const void *data, size_t size)
{
    const char *p = (const char *) data;
    while (size > 0) {
        ssize_t n = write (fd, p, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        size -= (size_t) n;
    }
    return 0;
}

//  Bytes of one tensor in the layout block: name, rows, cols.
#define S_TENSOR_BYTES  (KD_TENSOR_NAME_MAX + 16)

//  The layout block of meta into out; returns its length.
static size_t
s_layout_encode (const kd_checkpoint_meta_t *meta, uint8_t *out)
{
    s_put32 (out, meta->n_tensors);
    uint8_t *p = out + 4;
    for (uint32_t i = 0; i < meta->n_tensors; i++, p += S_TENSOR_BYTES) {
        memset (p, 0, KD_TENSOR_NAME_MAX);
        memcpy (p, meta->tensors [i].name, strnlen (meta->tensors [i].name, KD_TENSOR_NAME_MAX - 1));
        s_put64 (p + KD_TENSOR_NAME_MAX, meta->tensors [i].rows);
        s_put64 (p + KD_TENSOR_NAME_MAX + 8, meta->tensors [i].cols);
    }
    return (size_t) (p - out);
}

//  Read n tensors from a layout block into meta, computing offsets; the
//  shapes must be positive and sum to n_params (a keyed range's: rows of
//  key_dim values, the rows summing to n_params keys).  Returns 0 or -2.
static int
s_layout_decode (const uint8_t *block, uint32_t n, kd_checkpoint_meta_t *meta)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *p = block + (size_t) i * S_TENSOR_BYTES;
        kd_tensor_t *t = &meta->tensors [i];
        memset (t, 0, sizeof *t);
        memcpy (t->name, p, KD_TENSOR_NAME_MAX - 1);
        uint64_t rows = s_get64 (p + KD_TENSOR_NAME_MAX), cols = s_get64 (p + KD_TENSOR_NAME_MAX + 8);
        uint64_t size = meta->key_dim ? rows : rows * cols;
        if (!t->name [0] || p [KD_TENSOR_NAME_MAX - 1] != 0 || rows == 0 || cols == 0
        ||  (meta->key_dim ? cols != meta->key_dim || rows > SIZE_MAX / cols
                           : rows > UINT32_MAX || cols > UINT32_MAX)
        ||  size > meta->n_params - total)
            return -2;
        t->offset = (size_t) total;
        t->rows = (size_t) rows;
        t->cols = (size_t) cols;
        t->count = (size_t) (rows * cols);
        total += size;
    }
    meta->n_tensors = n;
    return n == 0 || total == meta->n_params ? 0 : -2;
}

//  fsync a directory, so that a rename in it survives a crash.
static int
s_sync_dir (const char *dir)
{
    int fd = open (dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return -1;
    int rc = fsync (fd);
    close (fd);
    return rc;
}

//  True for a final checkpoint name, ckpt-<20 digits>.kdc.
static bool
s_is_checkpoint (const char *name)
{
    size_t len = strlen (name);
    if (len != strlen (S_PREFIX) + 20 + strlen (S_SUFFIX)
    ||  strncmp (name, S_PREFIX, strlen (S_PREFIX)) != 0
    ||  strcmp (name + len - strlen (S_SUFFIX), S_SUFFIX) != 0)
        return false;
    for (size_t i = strlen (S_PREFIX); i < strlen (S_PREFIX) + 20; i++)
        if (name [i] < '0' || name [i] > '9')
            return false;
    return true;
}

//  True for a temporary file a writer may have left: .ckpt-*.tmp.
static bool
s_is_temporary (const char *name)
{
    size_t len = strlen (name);
    return len > 6 && !strncmp (name, "." S_PREFIX, strlen (S_PREFIX) + 1)
        && !strcmp (name + len - 4, ".tmp");
}

static int
s_compare_names (const void *a, const void *b)
{
    return strcmp (*(char *const *) a, *(char *const *) b);
}

//  Sorted names of the final checkpoints in dir (caller frees each and the
//  array).  With clean_temporary, leftover temporary files are deleted.
//  Returns the count, or -1 if dir cannot be read.
static int
s_list (const char *dir, char ***names_p, bool clean_temporary)
{
    DIR *d = opendir (dir);
    if (!d)
        return -1;
    char **names = (char **) calloc (S_MAX_FILES, sizeof (char *));
    int n = 0;
    struct dirent *e;
    while (names && (e = readdir (d))) {
        if (s_is_checkpoint (e->d_name) && n < S_MAX_FILES)
            names [n++] = strdup (e->d_name);
        else
        if (clean_temporary && s_is_temporary (e->d_name)) {
            char path [4096];
            snprintf (path, sizeof path, "%s/%s", dir, e->d_name);
            kd_warn ("removing half-written checkpoint path=%s", path);
            unlink (path);
        }
    }
    closedir (d);
    if (!names)
        return -1;
    qsort (names, (size_t) n, sizeof (char *), s_compare_names);
    *names_p = names;
    return n;
}

static void
s_free_names (char **names, int n)
{
    for (int i = 0; i < n; i++)
        free (names [i]);
    free (names);
}

int
kd_checkpoint_write (const char *dir, const kd_checkpoint_meta_t *meta,
                     const float *params, const float *state,
                     int keep, char *err, size_t err_size)
{
    bool keyed = meta->key_dim > 0;
    if (meta->hi <= meta->lo || (!keyed && meta->hi - meta->lo > KD_CHECKPOINT_MAX_KEYS)) {
        snprintf (err, err_size, "bad range lo=%llu hi=%llu",
                  (unsigned long long) meta->lo, (unsigned long long) meta->hi);
        return -1;
    }
    if (keyed && (meta->key_dim > S_MAX_KEY_DIM || meta->key_rows > meta->hi - meta->lo
              ||  meta->key_rows > KD_CHECKPOINT_MAX_KEYS || (meta->key_rows > 0 && (!meta->keys || !params)))) {
        snprintf (err, err_size, "bad keyed range: %llu rows of %u values",
                  (unsigned long long) meta->key_rows, meta->key_dim);
        return -1;
    }
    if (meta->n_state > KD_CHECKPOINT_MAX_STATE || (meta->n_state > 0 && !state && !keyed)) {
        snprintf (err, err_size, "bad optimizer state: %u buffers", meta->n_state);
        return -1;
    }
    if (meta->n_tensors > KD_CHECKPOINT_MAX_TENSORS) {
        snprintf (err, err_size, "bad layout: %u tensors", meta->n_tensors);
        return -1;
    }
    //  A keyed range: the keys, then its rows with their state, in params.
    size_t count = keyed ? (size_t) meta->key_rows * (1 + meta->n_state) * meta->key_dim
                         : (size_t) (meta->hi - meta->lo);
    size_t state_bytes = keyed ? 0 : (size_t) meta->n_state * count * sizeof (float);
    size_t keys_bytes = keyed ? (size_t) meta->key_rows * sizeof (uint64_t) : 0;
    uint8_t layout [4 + KD_CHECKPOINT_MAX_TENSORS * S_TENSOR_BYTES];
    size_t layout_bytes = s_layout_encode (meta, layout);
    uint8_t header [KD_CHECKPOINT_HEADER] = { 0 };
    memcpy (header, S_MAGIC, 8);
    s_put64 (header + S_OFF_VERSION, meta->version);
    s_put64 (header + S_OFF_SAMPLES, meta->samples);
    s_put64 (header + S_OFF_RANK, meta->rank);
    s_put64 (header + S_OFF_LO, meta->lo);
    s_put64 (header + S_OFF_HI, meta->hi);
    s_put64 (header + S_OFF_N_PARAMS, meta->n_params);
    s_put32 (header + S_OFF_KIND, meta->kind);
    s_put32 (header + S_OFF_HIDDEN, meta->hidden);
    s_put64 (header + S_OFF_TS, meta->ts_ms);
    s_put32 (header + S_OFF_N_STATE, meta->n_state);
    s_put32 (header + S_OFF_OPT_KIND, meta->opt_kind);
    s_put64 (header + S_OFF_OPT_STEPS, meta->opt_steps);
    s_put32 (header + S_OFF_KEY_DIM, meta->key_dim);
    s_put64 (header + S_OFF_KEY_ROWS, keyed ? meta->key_rows : 0);

    uLong crc = crc32 (0L, Z_NULL, 0);
    crc = s_crc (crc, header, sizeof header);
    crc = s_crc (crc, layout, layout_bytes);
    if (keys_bytes > 0)
        crc = s_crc (crc, meta->keys, keys_bytes);
    crc = s_crc (crc, params, count * sizeof (float));
    if (state_bytes > 0)
        crc = s_crc (crc, state, state_bytes);
    uint8_t trailer [4];
    s_put32 (trailer, (uint32_t) crc);

    char tmp [4096], path [4096];
    snprintf (tmp, sizeof tmp, "%s/." S_PREFIX "%020llu-%d.tmp", dir,
              (unsigned long long) meta->version, (int) getpid ());
    snprintf (path, sizeof path, "%s/" S_PREFIX "%020llu" S_SUFFIX, dir,
              (unsigned long long) meta->version);
    int fd = open (tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf (err, err_size, "cannot create %s: %s", tmp, strerror (errno));
        return -1;
    }
    if (s_write_all (fd, header, sizeof header)
    ||  s_write_all (fd, layout, layout_bytes)
    ||  (keys_bytes > 0 && s_write_all (fd, meta->keys, keys_bytes))
    ||  s_write_all (fd, params, count * sizeof (float))
    ||  (state_bytes > 0 && s_write_all (fd, state, state_bytes))
    ||  s_write_all (fd, trailer, sizeof trailer)
    ||  fsync (fd)) {
        snprintf (err, err_size, "cannot write %s: %s", tmp, strerror (errno));
        close (fd);
        unlink (tmp);
        return -1;
    }
    close (fd);
    if (rename (tmp, path) || s_sync_dir (dir)) {
        snprintf (err, err_size, "cannot rename %s: %s", tmp, strerror (errno));
        unlink (tmp);
        return -1;
    }
    //  Keep the newest few: one damaged by the disk still has a fallback.
    char **names = NULL;
    int n = s_list (dir, &names, false);
    for (int i = 0; i < n - (keep > 0 ? keep : 1); i++) {
        char old [4096];
        snprintf (old, sizeof old, "%s/%s", dir, names [i]);
        unlink (old);
    }
    if (n >= 0)
        s_free_names (names, n);
    return 0;
}

int
kd_checkpoint_read (const char *path, kd_checkpoint_meta_t *meta,
                    float **params_p, float **state_p,
                    char *err, size_t err_size)
{
    *params_p = *state_p = NULL;
    meta->keys = NULL;
    FILE *f = fopen (path, "rb");
    if (!f) {
        snprintf (err, err_size, "cannot open %s: %s", path, strerror (errno));
        return -1;
    }
    int rc = -2;
    float *params = NULL, *state = NULL;
    uint64_t *keys = NULL;
    uint8_t header [KD_CHECKPOINT_HEADER], trailer [4];
    struct stat st;
    if (fstat (fileno (f), &st) || fread (header, 1, sizeof header, f) != sizeof header) {
        snprintf (err, err_size, "%s: shorter than a header", path);
        goto done;
    }
    bool v1 = memcmp (header, S_MAGIC_V1, 8) == 0;
    if (!v1 && memcmp (header, S_MAGIC, 8) != 0) {
        snprintf (err, err_size, "%s: not a Kudus checkpoint (bad magic)", path);
        goto done;
    }
    kd_checkpoint_meta_t m = {
        .version = s_get64 (header + S_OFF_VERSION),
        .samples = s_get64 (header + S_OFF_SAMPLES),
        .rank = s_get64 (header + S_OFF_RANK),
        .lo = s_get64 (header + S_OFF_LO),
        .hi = s_get64 (header + S_OFF_HI),
        .n_params = s_get64 (header + S_OFF_N_PARAMS),
        .kind = s_get32 (header + S_OFF_KIND),
        .hidden = s_get32 (header + S_OFF_HIDDEN),
        .ts_ms = s_get64 (header + S_OFF_TS),
        .n_state = v1 ? 1 : s_get32 (header + S_OFF_N_STATE),
        .opt_kind = v1 ? 0 : s_get32 (header + S_OFF_OPT_KIND),
        .opt_steps = v1 ? s_get64 (header + S_OFF_VERSION) : s_get64 (header + S_OFF_OPT_STEPS),
        .key_dim = v1 ? 0 : s_get32 (header + S_OFF_KEY_DIM),
        .key_rows = v1 ? 0 : s_get64 (header + S_OFF_KEY_ROWS)
    };
    bool keyed = m.key_dim > 0;
    if (m.n_state > KD_CHECKPOINT_MAX_STATE) {
        snprintf (err, err_size, "%s: %u optimizer state buffers, at most %d", path, m.n_state,
                  KD_CHECKPOINT_MAX_STATE);
        goto done;
    }
    //  Check the declared sizes against the file before allocating.
    if (m.hi <= m.lo || m.hi > m.n_params || (!keyed && m.hi - m.lo > KD_CHECKPOINT_MAX_KEYS)) {
        snprintf (err, err_size, "%s: bad range lo=%llu hi=%llu params=%llu", path,
                  (unsigned long long) m.lo, (unsigned long long) m.hi,
                  (unsigned long long) m.n_params);
        goto done;
    }
    if (keyed && (m.key_dim > S_MAX_KEY_DIM || m.key_rows > m.hi - m.lo || m.key_rows > KD_CHECKPOINT_MAX_KEYS)) {
        snprintf (err, err_size, "%s: bad keyed range: %llu rows of %u values", path,
                  (unsigned long long) m.key_rows, m.key_dim);
        goto done;
    }
    //  The layout block (version 2): its count is bounded before it is read.
    uint8_t layout [4 + KD_CHECKPOINT_MAX_TENSORS * S_TENSOR_BYTES];
    size_t layout_bytes = 0;
    if (!v1) {
        if (fread (layout, 1, 4, f) != 4 || s_get32 (layout) > KD_CHECKPOINT_MAX_TENSORS) {
            snprintf (err, err_size, "%s: bad layout (at most %d tensors)", path, KD_CHECKPOINT_MAX_TENSORS);
            goto done;
        }
        uint32_t n_tensors = s_get32 (layout);
        layout_bytes = 4 + (size_t) n_tensors * S_TENSOR_BYTES;
        if (fread (layout + 4, 1, layout_bytes - 4, f) != layout_bytes - 4
        ||  s_layout_decode (layout + 4, n_tensors, &m)) {
            snprintf (err, err_size, "%s: bad layout: its tensors do not make the model", path);
            goto done;
        }
    }
    //  Dense: count params and n_state * count of state.  Keyed: the keys,
    //  then count floats of rows and their state, in params.
    size_t count = keyed ? (size_t) m.key_rows * (1 + m.n_state) * m.key_dim : (size_t) (m.hi - m.lo);
    size_t n_keys = keyed ? (size_t) m.key_rows : 0;
    uint64_t expect = KD_CHECKPOINT_HEADER + layout_bytes + n_keys * sizeof (uint64_t)
                    + (keyed ? 1 : 1 + (uint64_t) m.n_state) * count * sizeof (float) + 4;
    if ((uint64_t) st.st_size != expect) {
        snprintf (err, err_size, "%s: %lld bytes, expected %llu (truncated or padded)", path,
                  (long long) st.st_size, (unsigned long long) expect);
        goto done;
    }
    size_t n_state = keyed ? 0 : (size_t) m.n_state * count;
    params = (float *) malloc ((count ? count : 1) * sizeof (float));
    state = n_state > 0 ? (float *) malloc (n_state * sizeof (float)) : NULL;
    keys = n_keys > 0 ? (uint64_t *) malloc (n_keys * sizeof (uint64_t)) : NULL;
    if (!params || (n_state > 0 && !state) || (n_keys > 0 && !keys)) {
        snprintf (err, err_size, "%s: out of memory for %zu keys", path, count);
        rc = -1;
        goto done;
    }
    if ((n_keys > 0 && fread (keys, sizeof (uint64_t), n_keys, f) != n_keys)
    ||  fread (params, sizeof (float), count, f) != count
    ||  (n_state > 0 && fread (state, sizeof (float), n_state, f) != n_state)
    ||  fread (trailer, 1, 4, f) != 4) {
        snprintf (err, err_size, "%s: short read", path);
        goto done;
    }
    uLong crc = crc32 (0L, Z_NULL, 0);
    crc = s_crc (crc, header, sizeof header);
    crc = s_crc (crc, layout, layout_bytes);
    if (n_keys > 0)
        crc = s_crc (crc, keys, n_keys * sizeof (uint64_t));
    crc = s_crc (crc, params, count * sizeof (float));
    if (n_state > 0)
        crc = s_crc (crc, state, n_state * sizeof (float));
    if ((uint32_t) crc != s_get32 (trailer)) {
        snprintf (err, err_size, "%s: CRC mismatch", path);
        goto done;
    }
    for (size_t i = 0; i < n_keys; i++)
        if (keys [i] < m.lo || keys [i] >= m.hi) {
            snprintf (err, err_size, "%s: key %llu outside the range", path, (unsigned long long) keys [i]);
            goto done;
        }
    //  Rows come in the table's order; a key twice would make the shard
    //  refuse the whole file at restore, so find it here, where an older
    //  checkpoint can still be taken instead.
    if (n_keys > 1) {
        uint64_t *sorted = (uint64_t *) malloc (n_keys * sizeof (uint64_t));
        if (!sorted) {
            snprintf (err, err_size, "%s: out of memory for %zu keys", path, n_keys);
            rc = -1;
            goto done;
        }
        memcpy (sorted, keys, n_keys * sizeof (uint64_t));
        qsort (sorted, n_keys, sizeof (uint64_t), s_compare_u64);
        size_t twice = 0;
        for (size_t i = 1; i < n_keys && !twice; i++)
            if (sorted [i] == sorted [i - 1])
                twice = i;
        uint64_t key = twice ? sorted [twice] : 0;
        free (sorted);
        if (twice) {
            snprintf (err, err_size, "%s: key %llu appears twice", path, (unsigned long long) key);
            goto done;
        }
    }
    m.keys = keys;
    *meta = m;
    *params_p = params;
    *state_p = state;
    params = state = NULL;
    keys = NULL;
    rc = 0;
done:
    free (params);
    free (state);
    free (keys);
    fclose (f);
    return rc;
}

int
kd_checkpoint_load_latest (const char *dir, kd_checkpoint_meta_t *meta,
                           float **params, float **state,
                           char *path, size_t path_size,
                           char *err, size_t err_size)
{
    char **names = NULL;
    int n = s_list (dir, &names, true);
    if (n < 0) {
        snprintf (err, err_size, "cannot read directory %s: %s", dir, strerror (errno));
        return -1;
    }
    int rc = 1;
    snprintf (err, err_size, "no checkpoint in %s", dir);
    for (int i = n - 1; i >= 0 && rc != 0; i--) {
        char file [4096], why [512];
        snprintf (file, sizeof file, "%s/%s", dir, names [i]);
        if (kd_checkpoint_read (file, meta, params, state, why, sizeof why) == 0) {
            if (path)
                snprintf (path, path_size, "%s", file);
            rc = 0;
        }
        else
            kd_warn ("skipping checkpoint: %s", why);
    }
    s_free_names (names, n);
    return rc;
}

int
kd_checkpoint_parse_every (const char *text, double *seconds, uint64_t *versions)
{
    *seconds = 0;
    *versions = 0;
    if (!text || !*text)
        return -1;
    char *end = NULL;
    errno = 0;
    double value = strtod (text, &end);
    if (errno || end == text || !(value > 0) || value > 1e9)
        return -1;
    if (!strcmp (end, "s")) {
        *seconds = value;
        return 0;
    }
    if ((!strcmp (end, "") || !strcmp (end, "v")) && value == (double) (uint64_t) value) {
        *versions = (uint64_t) value;
        return 0;
    }
    return -1;
}
