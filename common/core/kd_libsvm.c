/*  kd_libsvm: a streaming reader of LIBSVM / SVMlight text (see
    include/kudus/kd_libsvm.h).
*/
#include "kudus/kd_libsvm.h"
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define S_CHUNK     (256 * 1024)                    //  bytes per gzread
#define S_CAPACITY  (KD_LIBSVM_MAX_LINE + S_CHUNK)  //  a longest line always fits

struct _kd_libsvm_t {
    gzFile file;                //  NULL for a parse-only reader
    char *path;                 //  for messages
    uint64_t max_index;         //  0: any
    uint64_t line;              //  lines read so far
    char *buf;                  //  S_CAPACITY bytes read ahead
    size_t start, end;          //  unread bytes: buf [start, end)
    bool eof;                   //  gzread reached the end
    bool skipping;              //  inside a line too long, up to its newline
    uint64_t *index;            //  the row's entries
    float *value;
};

static kd_libsvm_t *
s_new (uint64_t max_index)
{
    kd_libsvm_t *self = (kd_libsvm_t *) calloc (1, sizeof (kd_libsvm_t));
    if (!self)
        return NULL;
    self->max_index = max_index;
    self->index = (uint64_t *) malloc (KD_LIBSVM_MAX_NNZ * sizeof (uint64_t));
    self->value = (float *) malloc (KD_LIBSVM_MAX_NNZ * sizeof (float));
    if (!self->index || !self->value) {
        kd_libsvm_destroy (&self);
        return NULL;
    }
    return self;
}

kd_libsvm_t *
kd_libsvm_new (uint64_t max_index)
{
    return s_new (max_index);
}

kd_libsvm_t *
kd_libsvm_open (const char *path, uint64_t max_index, char *err, size_t err_size)
{
    if (!path || !*path) {
        snprintf (err, err_size, "libsvm: no file named");
        return NULL;
    }
    kd_libsvm_t *self = s_new (max_index);
    if (self) {
        self->path = strdup (path);
        self->buf = (char *) malloc (S_CAPACITY);
    }
    if (!self || !self->path || !self->buf) {
        snprintf (err, err_size, "libsvm: out of memory opening %s", path);
        kd_libsvm_destroy (&self);
        return NULL;
    }
    self->file = gzopen (path, "rb");
    if (!self->file) {
        snprintf (err, err_size, "libsvm: cannot open %s: %s", path,
                  errno ? strerror (errno) : "out of memory");
        kd_libsvm_destroy (&self);
        return NULL;
    }
    gzbuffer (self->file, 256 * 1024);
    return self;
}

void
kd_libsvm_destroy (kd_libsvm_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kd_libsvm_t *self = *self_p;
    if (self->file)
        gzclose (self->file);
    free (self->path);
    free (self->buf);
    free (self->index);
    free (self->value);
    free (self);
    *self_p = NULL;
}

//  A finite float at s (strtof's syntax, but no hex, inf or nan); the end
//  of the number in *end.  Returns 0 or -1.
static int
s_number (const char *s, const char *limit, float *out, const char **end)
{
    char tmp [64];
    size_t n = 0;
    while (s + n < limit && n < sizeof tmp - 1 && strchr ("+-.0123456789eE", s [n]))
        n++;
    if (n == 0 || n == sizeof tmp - 1)
        return -1;
    memcpy (tmp, s, n);
    tmp [n] = 0;
    char *stop = NULL;
    errno = 0;
    float v = strtof (tmp, &stop);
    if (stop != tmp + n || !isfinite (v))
        return -1;
    *out = v;
    *end = s + n;
    return 0;
}

//  A decimal uint64 at s; the end in *end.  Returns 0 or -1 (no digits,
//  or an overflow).
static int
s_uint (const char *s, const char *limit, uint64_t *out, const char **end)
{
    uint64_t v = 0;
    const char *p = s;
    while (p < limit && *p >= '0' && *p <= '9') {
        unsigned digit = (unsigned) (*p - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return -1;
        v = v * 10 + digit;
        p++;
    }
    if (p == s)
        return -1;
    *out = v;
    *end = p;
    return 0;
}

static int
s_fail (char *err, size_t err_size, const char *what, const char *at, const char *line)
{
    snprintf (err, err_size, "%s at column %zu", what, (size_t) (at - line) + 1);
    return -2;
}

int
kd_libsvm_parse (kd_libsvm_t *self, const char *line, size_t len, kd_libsvm_row_t *row,
                 char *err, size_t err_size)
{
    const char *p = line, *limit = line + len;
    //  A comment runs to the end of the line.
    const char *hash = memchr (line, '#', len);
    if (hash)
        limit = hash;
    while (p < limit && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    if (p == limit)
        return 0;
    const char *nul = (const char *) memchr (line, 0, (size_t) (limit - line));
    if (nul)
        return s_fail (err, err_size, "NUL byte", nul, line);
    float label;
    const char *end;
    if (s_number (p, limit, &label, &end) || (end < limit && *end != ' ' && *end != '\t' && *end != '\r'))
        return s_fail (err, err_size, "label is not a finite number", p, line);
    p = end;
    size_t nnz = 0;
    while (true) {
        while (p < limit && (*p == ' ' || *p == '\t' || *p == '\r'))
            p++;
        if (p == limit)
            break;
        if (limit - p >= 4 && !memcmp (p, "qid:", 4)) {
            uint64_t qid;
            if (s_uint (p + 4, limit, &qid, &end))
                return s_fail (err, err_size, "qid is not a decimal integer", p, line);
            p = end;
            continue;
        }
        uint64_t index;
        if (s_uint (p, limit, &index, &end) || end >= limit || *end != ':')
            return s_fail (err, err_size, "expected index:value", p, line);
        if (self->max_index && index > self->max_index) {
            char what [96];
            snprintf (what, sizeof what, "index %llu over the largest, %llu",
                      (unsigned long long) index, (unsigned long long) self->max_index);
            return s_fail (err, err_size, what, p, line);
        }
        if (nnz > 0 && index <= self->index [nnz - 1])
            return s_fail (err, err_size, "indices not in increasing order", p, line);
        if (nnz == KD_LIBSVM_MAX_NNZ)
            return s_fail (err, err_size, "more entries than KD_LIBSVM_MAX_NNZ", p, line);
        float value;
        const char *v = end + 1;
        if (s_number (v, limit, &value, &end) || (end < limit && *end != ' ' && *end != '\t' && *end != '\r'))
            return s_fail (err, err_size, "value is not a finite number", v, line);
        self->index [nnz] = index;
        self->value [nnz++] = value;
        p = end;
    }
    *row = (kd_libsvm_row_t) {
        .label = label, .nnz = nnz, .index = self->index, .value = self->value, .line = self->line
    };
    return 1;
}

//  Read more of the file behind the unread bytes.  Returns bytes read, 0
//  at the end, -1 on a read error.
static int
s_fill (kd_libsvm_t *self)
{
    if (self->eof)
        return 0;
    if (self->start > 0) {
        memmove (self->buf, self->buf + self->start, self->end - self->start);
        self->end -= self->start;
        self->start = 0;
    }
    size_t room = S_CAPACITY - self->end;
    if (room > S_CHUNK)
        room = S_CHUNK;
    int n = gzread (self->file, self->buf + self->end, (unsigned) room);
    if (n < 0)
        return -1;
    if (n == 0) {
        //  A gzip stream cut short reads as an end with Z_BUF_ERROR: its
        //  last line would be a truncated row.
        int code = Z_OK;
        gzerror (self->file, &code);
        if (code == Z_BUF_ERROR)
            return -1;
        self->eof = true;
    }
    self->end += (size_t) n;
    return n;
}

int
kd_libsvm_next (kd_libsvm_t *self, kd_libsvm_row_t *row, char *err, size_t err_size)
{
    if (!self || !self->file) {
        snprintf (err, err_size, "libsvm: no file open");
        return -1;
    }
    while (true) {
        char *at = self->buf + self->start;
        size_t have = self->end - self->start;
        char *newline = (char *) memchr (at, '\n', have);
        if (!newline && self->skipping) {
            self->start = self->end;
            if (s_fill (self) < 0)
                goto read_error;
            if (self->eof && self->start == self->end)
                return 0;
            continue;
        }
        if (!newline && have > KD_LIBSVM_MAX_LINE) {
            //  Reported once, then skipped up to its newline.
            self->line++;
            self->skipping = true;
            self->start = self->end;
            snprintf (err, err_size, "%s:%llu: line longer than %d bytes", self->path,
                      (unsigned long long) self->line, KD_LIBSVM_MAX_LINE);
            return -2;
        }
        if (!newline && !self->eof) {
            if (s_fill (self) < 0)
                goto read_error;
            continue;
        }
        if (!newline && have == 0)
            return 0;
        //  A whole line, or the last one without a newline.
        size_t len = newline ? (size_t) (newline - at) : have;
        self->start += newline ? len + 1 : len;
        if (self->skipping) {
            self->skipping = false;
            continue;
        }
        self->line++;
        if (len > KD_LIBSVM_MAX_LINE) {
            snprintf (err, err_size, "%s:%llu: line longer than %d bytes", self->path,
                      (unsigned long long) self->line, KD_LIBSVM_MAX_LINE);
            return -2;
        }
        char why [160];
        int rc = kd_libsvm_parse (self, at, len, row, why, sizeof why);
        if (rc == 1)
            return 1;
        if (rc == -2) {
            snprintf (err, err_size, "%s:%llu: %s", self->path, (unsigned long long) self->line, why);
            return -2;
        }
    }
read_error:
    {
        int code = 0;
        const char *why = gzerror (self->file, &code);
        snprintf (err, err_size, "%s:%llu: cannot read: %s", self->path,
                  (unsigned long long) self->line + 1, why);
        return -1;
    }
}
