/*  kd_dataset: loads IDX image and label files (the MNIST format).

    An IDX file is a big-endian header followed by a flat byte payload:
        images:  0x00000803, count, rows, cols, then count*rows*cols pixels
        labels:  0x00000801, count, then count labels
    Both files come from disk, so nothing in them is trusted: every header
    field is checked against a bound before anything is allocated, and a
    short read is an error, not a crash.  Reading goes through zlib's gzread,
    which decompresses .gz files and passes plain files through unchanged.

    Workers load only their partition [lo, hi) of the training set.  Rows
    before lo are read and discarded (gzseek on a gzip stream would have to
    decompress them too); rows after hi are not read at all, so a gzip file
    cut short after hi is only noticed by a load that reaches its end.  (A
    plain file's size is checked against its header up front.)  When hi is
    the end of the file, one more byte is read: that makes zlib check the
    gzip trailer's CRC and length, and catches payloads longer than their
    header says.
*/
#include "kd_dataset.h"
#include "kd_model.h"
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define KD_IDX_IMAGES_MAGIC   0x00000803u
#define KD_IDX_LABELS_MAGIC   0x00000801u
#define KD_IDX_MAX_DIM        4096u            //  rows * cols per image
#define KD_IDX_MAX_COUNT      10000000u        //  images per file
#define KD_IDX_CHUNK          (1u << 16)       //  bytes per gzread
#define KD_IDX_GZ_BUFFER      (1u << 17)       //  zlib's input buffer
#define KD_IDX_HUGE_PAGE      (1u << 21)       //  transparent huge page size

struct _kd_dataset_t {
    size_t count;                       //  rows loaded (hi - lo)
    size_t total;                       //  rows in the files
    size_t dim;                         //  pixels per row (rows * cols)
    float *images;                      //  [count x dim] pixels in [0, 1]
    uint8_t *labels;                    //  [count] labels below KD_CLASSES
};

//  One open IDX file and what we need to describe its errors.
typedef struct {
    gzFile gz;                          //  zlib handle (plain or gzip)
    const char *path;                   //  for error messages
    uint64_t offset;                    //  uncompressed bytes read so far
    uint64_t size;                      //  uncompressed bytes the header implies
} s_idx_t;


//  --------------------------------------------------------------------------
//  Reading

//  Open path for reading; on failure write an error naming path and errno.
static int
s_open (s_idx_t *idx, const char *path, char *err, size_t err_size)
{
    idx->path = path;
    errno = 0;
    idx->gz = gzopen (path, "rb");
    if (!idx->gz) {
        //  gzopen leaves errno at 0 when only its own allocation failed.
        snprintf (err, err_size, "%s: cannot open: %s", path,
                  errno ? strerror (errno) : "out of memory");
        return -1;
    }
    gzbuffer (idx->gz, KD_IDX_GZ_BUFFER);
    return 0;
}

//  zlib's error text without the "path: " prefix gzerror puts on it.
static const char *
s_zlib_message (s_idx_t *idx, int *errnum)
{
    const char *msg = gzerror (idx->gz, errnum);
    if (!msg || !*msg)
        return "unknown zlib error";
    size_t len = strlen (idx->path);
    if (strncmp (msg, idx->path, len) == 0 && strncmp (msg + len, ": ", 2) == 0)
        msg += len + 2;
    return msg;
}

//  Describe why gzread stopped short: a zlib error (corrupt stream), an
//  I/O error, or plain end of data.
static void
s_read_error (s_idx_t *idx, const char *what, char *err, size_t err_size)
{
    int errnum = Z_OK;
    const char *msg = s_zlib_message (idx, &errnum);
    if (errnum == Z_ERRNO)
        snprintf (err, err_size, "%s: read error in %s: %s", idx->path, what,
                  strerror (errno));
    else
    if (errnum == Z_OK || errnum == Z_BUF_ERROR)
        //  Z_BUF_ERROR is zlib's "unexpected end of file" in a gzip stream.
        snprintf (err, err_size,
                  "%s: truncated %s: data ends after %llu of %llu bytes",
                  idx->path, what, (unsigned long long) idx->offset,
                  (unsigned long long) idx->size);
    else
        snprintf (err, err_size, "%s: corrupt gzip data in %s: %s",
                  idx->path, what, msg);
}

//  Read exactly len bytes into buf (or discard them if buf is NULL).
static int
s_read (s_idx_t *idx, void *buf, size_t len, const char *what,
        char *err, size_t err_size)
{
    uint8_t sink [4096];
    size_t got = 0;
    while (got < len) {
        size_t chunk = len - got;
        uint8_t *dest = buf ? (uint8_t *) buf + got : sink;
        if (!buf && chunk > sizeof sink)
            chunk = sizeof sink;
        if (chunk > KD_IDX_CHUNK)
            chunk = KD_IDX_CHUNK;
        int rc = gzread (idx->gz, dest, (unsigned) chunk);
        if (rc <= 0) {
            s_read_error (idx, what, err, err_size);
            return -1;
        }
        got += (size_t) rc;
        idx->offset += (uint64_t) rc;
    }
    return 0;
}

//  Check that nothing follows the payload; this also makes zlib verify the
//  gzip trailer.
static int
s_expect_end (s_idx_t *idx, const char *what, char *err, size_t err_size)
{
    uint8_t extra;
    int rc = gzread (idx->gz, &extra, 1);
    if (rc == 1) {
        snprintf (err, err_size, "%s: %s is longer than its header says%s",
                  idx->path, what,
                  gzdirect (idx->gz) ? "" : " (or the gzip data is corrupt)");
        return -1;
    }
    int errnum = Z_OK;
    const char *msg = s_zlib_message (idx, &errnum);
    if (rc < 0 || (errnum != Z_OK && errnum != Z_BUF_ERROR)) {
        snprintf (err, err_size, "%s: corrupt gzip data after %s: %s",
                  idx->path, what,
                  errnum == Z_ERRNO ? strerror (errno) : msg);
        return -1;
    }
    if (errnum == Z_BUF_ERROR) {
        //  The payload is complete but the gzip trailer is missing.
        snprintf (err, err_size, "%s: truncated gzip stream after %s",
                  idx->path, what);
        return -1;
    }
    return 0;
}

//  For a plain (not gzipped) file, check its size against the header
//  before allocating, so a short file with a huge count fails with a clear
//  message instead of a huge allocation.  Gzip streams are checked while
//  they are read.
static int
s_check_size (s_idx_t *idx, const char *what, char *err, size_t err_size)
{
    uint64_t want = idx->size;
    struct stat st;
    if (!gzdirect (idx->gz) || stat (idx->path, &st) != 0
    ||  !S_ISREG (st.st_mode))
        return 0;
    if ((uint64_t) st.st_size < want) {
        snprintf (err, err_size,
                  "%s: truncated %s: file has %llu bytes, header needs %llu",
                  idx->path, what, (unsigned long long) st.st_size,
                  (unsigned long long) want);
        return -1;
    }
    return 0;
}

//  Room for n pixels.  The training set is 188 MB of floats, and faulting
//  it in 4 KiB pages cost more than decompressing it, so a large buffer is
//  aligned to 2 MiB and offered to the kernel for transparent huge pages.
//  Freed with free ().
static float *
s_alloc_pixels (size_t n)
{
    size_t bytes = n * sizeof (float);
#ifdef MADV_HUGEPAGE
    if (bytes >= KD_IDX_HUGE_PAGE) {
        void *p = NULL;
        size_t rounded = (bytes + KD_IDX_HUGE_PAGE - 1) & ~((size_t) KD_IDX_HUGE_PAGE - 1);
        if (posix_memalign (&p, KD_IDX_HUGE_PAGE, rounded) != 0)
            return NULL;
        //  Only advice: where huge pages are off this changes nothing.
        madvise (p, rounded, MADV_HUGEPAGE);
        return (float *) p;
    }
#endif
    return (float *) malloc (bytes);
}

//  Read a header of n big-endian 32-bit words.
static int
s_read_header (s_idx_t *idx, uint32_t *words, size_t n,
               char *err, size_t err_size)
{
    uint8_t raw [16];
    assert (n * 4 <= sizeof raw);
    //  Until the header is parsed, the header is all we expect.
    idx->size = n * 4;
    if (s_read (idx, raw, n * 4, "header", err, err_size))
        return -1;
    for (size_t i = 0; i < n; i++)
        words [i] = (uint32_t) raw [4 * i] << 24 | (uint32_t) raw [4 * i + 1] << 16
                  | (uint32_t) raw [4 * i + 2] << 8 | (uint32_t) raw [4 * i + 3];
    return 0;
}

//  Read n rows of dim pixels and scale them to [0, 1].
static int
s_read_pixels (s_idx_t *idx, float *out, size_t n, size_t dim,
               char *err, size_t err_size)
{
    //  A table keeps the exact value of b / 255.0f without a division per
    //  pixel.
    float scale [256];
    for (int b = 0; b < 256; b++)
        scale [b] = (float) b / 255.0f;
    uint8_t buf [KD_IDX_CHUNK];
    size_t left = n * dim;
    while (left > 0) {
        size_t chunk = left < sizeof buf ? left : sizeof buf;
        if (s_read (idx, buf, chunk, "image payload", err, err_size))
            return -1;
        for (size_t i = 0; i < chunk; i++)
            out [i] = scale [buf [i]];
        out += chunk;
        left -= chunk;
    }
    return 0;
}


//  --------------------------------------------------------------------------
//  Public API

//  Load rows [lo, hi) of an image file and its label file.
kd_dataset_t *
kd_dataset_load (const char *images_path, const char *labels_path,
                 size_t lo, size_t hi, char *err, size_t err_size)
{
    assert (images_path && labels_path);
    assert (err && err_size > 0);
    err [0] = 0;
    kd_dataset_t *self = NULL;          //  under construction
    kd_dataset_t *result = NULL;        //  set once everything checked out
    s_idx_t images = { NULL, images_path, 0, 0 };
    s_idx_t labels = { NULL, labels_path, 0, 0 };

    //  Both headers first, so a mismatch is reported before the payload
    //  is read.
    uint32_t ih [4], lh [2];
    if (s_open (&images, images_path, err, err_size)
    ||  s_read_header (&images, ih, 4, err, err_size))
        goto cleanup;
    if (ih [0] != KD_IDX_IMAGES_MAGIC) {
        snprintf (err, err_size,
                  "%s: bad magic 0x%08x (want 0x%08x for an IDX image file)",
                  images_path, ih [0], KD_IDX_IMAGES_MAGIC);
        goto cleanup;
    }
    uint32_t count = ih [1], rows = ih [2], cols = ih [3];
    if (count == 0 || count > KD_IDX_MAX_COUNT) {
        snprintf (err, err_size, "%s: image count %u is not in 1..%u",
                  images_path, count, KD_IDX_MAX_COUNT);
        goto cleanup;
    }
    if (rows == 0 || cols == 0
    ||  (uint64_t) rows * cols > KD_IDX_MAX_DIM) {
        snprintf (err, err_size,
                  "%s: image size %ux%u is empty or above %u pixels",
                  images_path, rows, cols, KD_IDX_MAX_DIM);
        goto cleanup;
    }
    if (s_open (&labels, labels_path, err, err_size)
    ||  s_read_header (&labels, lh, 2, err, err_size))
        goto cleanup;
    if (lh [0] != KD_IDX_LABELS_MAGIC) {
        snprintf (err, err_size,
                  "%s: bad magic 0x%08x (want 0x%08x for an IDX label file)",
                  labels_path, lh [0], KD_IDX_LABELS_MAGIC);
        goto cleanup;
    }
    if (lh [1] != count) {
        snprintf (err, err_size,
                  "%s: label count %u does not match image count %u in %s",
                  labels_path, lh [1], count, images_path);
        goto cleanup;
    }
    size_t end = hi == 0 ? count : hi;
    if (lo >= end || end > count) {
        snprintf (err, err_size,
                  "%s: bad row range [%zu, %zu): the file has %u rows",
                  images_path, lo, end, count);
        goto cleanup;
    }

    uint64_t dim = (uint64_t) rows * cols;
    images.size = 16 + (uint64_t) count * dim;
    labels.size = 8 + (uint64_t) count;
    if (s_check_size (&images, "image payload", err, err_size)
    ||  s_check_size (&labels, "label payload", err, err_size))
        goto cleanup;

    self = (kd_dataset_t *) calloc (1, sizeof (kd_dataset_t));
    if (self) {
        self->total = count;
        self->count = end - lo;
        self->dim = (size_t) dim;
        self->images = s_alloc_pixels (self->count * self->dim);
        self->labels = (uint8_t *) malloc (self->count);
    }
    if (!self || !self->images || !self->labels) {
        snprintf (err, err_size, "%s: out of memory for %zu rows",
                  images_path, end - lo);
        goto cleanup;
    }

    if (s_read (&images, NULL, lo * self->dim, "image payload", err, err_size)
    ||  s_read_pixels (&images, self->images, self->count, self->dim,
                       err, err_size))
        goto cleanup;
    if (end == count && s_expect_end (&images, "image payload", err, err_size))
        goto cleanup;
    if (s_read (&labels, NULL, lo, "label payload", err, err_size)
    ||  s_read (&labels, self->labels, self->count, "label payload",
                err, err_size))
        goto cleanup;
    if (end == count && s_expect_end (&labels, "label payload", err, err_size))
        goto cleanup;
    for (size_t r = 0; r < self->count; r++)
        if (self->labels [r] >= KD_CLASSES) {
            snprintf (err, err_size, "%s: label %u at row %zu is not below %d",
                      labels_path, self->labels [r], lo + r, KD_CLASSES);
            goto cleanup;
        }

    result = self;
    self = NULL;

cleanup:
    if (images.gz)
        gzclose (images.gz);
    if (labels.gz)
        gzclose (labels.gz);
    kd_dataset_destroy (&self);
    if (!result && !err [0])
        snprintf (err, err_size, "%s: cannot load", images_path);
    return result;
}

//  Path of dir/name-kind, preferring the .gz file.  Returns 0, or -1 with
//  an error if neither file exists or the path does not fit.
static int
s_find_file (const char *dir, const char *name, const char *kind,
             char *path, size_t path_size, char *err, size_t err_size)
{
    int len = snprintf (path, path_size, "%s/%s-%s.gz", dir, name, kind);
    if (len < 0 || (size_t) len >= path_size) {
        snprintf (err, err_size, "%s: path too long", dir);
        return -1;
    }
    if (access (path, F_OK) == 0)
        return 0;
    snprintf (path, path_size, "%s/%s-%s", dir, name, kind);
    if (access (path, F_OK) == 0)
        return 0;
    snprintf (err, err_size, "%s/%s-%s[.gz]: cannot open: %s", dir, name,
              kind, strerror (errno));
    return -1;
}

//  Load "train" or "t10k" from a Fashion-MNIST directory.
kd_dataset_t *
kd_dataset_load_dir (const char *dir, const char *name, size_t lo,
                     size_t hi, char *err, size_t err_size)
{
    assert (err && err_size > 0);
    err [0] = 0;
    if (!dir || !*dir || !name || !*name || strchr (name, '/')) {
        snprintf (err, err_size, "dataset: need a directory and a name such "
                  "as train or t10k (got '%s' in '%s')", name ? name : "",
                  dir ? dir : "");
        return NULL;
    }
    char images [PATH_MAX], labels [PATH_MAX];
    if (s_find_file (dir, name, "images-idx3-ubyte", images, sizeof images,
                     err, err_size)
    ||  s_find_file (dir, name, "labels-idx1-ubyte", labels, sizeof labels,
                     err, err_size))
        return NULL;
    return kd_dataset_load (images, labels, lo, hi, err, err_size);
}

//  Destroy the dataset and null the caller's pointer.
void
kd_dataset_destroy (kd_dataset_t **self_p)
{
    assert (self_p);
    kd_dataset_t *self = *self_p;
    if (!self)
        return;
    free (self->images);
    free (self->labels);
    free (self);
    *self_p = NULL;
}

//  Rows loaded.
size_t
kd_dataset_count (kd_dataset_t *self)
{
    assert (self);
    return self->count;
}

//  Rows in the file.
size_t
kd_dataset_total (kd_dataset_t *self)
{
    assert (self);
    return self->total;
}

//  Pixels per row.
size_t
kd_dataset_dim (kd_dataset_t *self)
{
    assert (self);
    return self->dim;
}

//  Pixels, row-major; borrowed.
const float *
kd_dataset_images (kd_dataset_t *self)
{
    assert (self);
    return self->images;
}

//  Labels; borrowed.
const uint8_t *
kd_dataset_labels (kd_dataset_t *self)
{
    assert (self);
    return self->labels;
}
