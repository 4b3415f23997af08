/*  kd_libsvm: a streaming reader of LIBSVM / SVMlight text files.  Public
    API.

    Each line is `label index:value index:value ... [# comment]`, the
    format of LIBSVM, SVMlight, and the click logs (avazu, criteo, rcv1) that
    sparse models train on.  Files may be gzipped (read through zlib's
    gzread, which passes plain files through).  Rows are read one at a time,
    so a file far larger than memory streams.

    Every line is checked: the label and every value are finite numbers,
    indices are decimal integers in strictly increasing order and at most
    max_index, a `qid:N` token (SVMlight's query id) is skipped, and a line
    is at most KD_LIBSVM_MAX_LINE bytes with at most KD_LIBSVM_MAX_NNZ
    entries.  A bad line is reported with its file and line number, and the
    next call goes on with the next line: bad input is an error, never a
    crash.  Blank lines and comment lines are skipped.
*/
#ifndef KD_LIBSVM_H_INCLUDED
#define KD_LIBSVM_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KD_LIBSVM_MAX_LINE  (1 << 20)       //  bytes in one line at most
#define KD_LIBSVM_MAX_NNZ   65536           //  entries in one row at most

//  One row; its arrays belong to the reader and hold until the next call.
typedef struct {
    float label;                //  as written: 1, +1, -1, 0, 0.5 ...
    size_t nnz;                 //  entries
    const uint64_t *index;      //  strictly increasing
    const float *value;         //  finite
    uint64_t line;              //  its line in the file (1-based)
} kd_libsvm_row_t;

typedef struct _kd_libsvm_t kd_libsvm_t;

//  Open a file; indices above max_index are errors (0: any index).  NULL
//  with a message naming the file in err when it cannot be opened.
kd_libsvm_t *
    kd_libsvm_open (const char *path, uint64_t max_index, char *err, size_t err_size);

//  Close the file and null the caller's pointer.
void
    kd_libsvm_destroy (kd_libsvm_t **self_p);

//  Read the next row.  Returns 1 with *row set, 0 at the end of the file,
//  -1 when the file cannot be read, or -2 for a malformed line, with
//  "FILE:LINE: reason" in err; after -2 the next call reads the next line.
int
    kd_libsvm_next (kd_libsvm_t *self, kd_libsvm_row_t *row, char *err, size_t err_size);

//  Parse one line held in memory (no newline needed), as kd_libsvm_next
//  does: 1 with *row set (arrays owned by the reader), 0 for a blank or
//  comment line, -2 with a reason in err.  For readers of other sources,
//  and for the fuzzer.
int
    kd_libsvm_parse (kd_libsvm_t *self, const char *line, size_t len, kd_libsvm_row_t *row,
                     char *err, size_t err_size);

//  A reader that parses lines only (kd_libsvm_parse), with no file.
kd_libsvm_t *
    kd_libsvm_new (uint64_t max_index);

#ifdef __cplusplus
}
#endif

#endif
