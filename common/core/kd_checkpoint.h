/*  kd_checkpoint: durable snapshots of one shard's key range.

    A checkpoint holds a shard's parameters, its optimizer's state
    (kd_optimizer: none, one or two buffers, and its step count), its
    version and enough of the model's identity to refuse a checkpoint that
    belongs to another model or range.  Writing is atomic: the bytes go to a
    temporary file in the same directory, which is fsynced, renamed over its
    final name and followed by an fsync of the directory, so a crash leaves
    either the old set of files or the new one, never half a checkpoint
    under a final name.  A CRC-32 over the whole file catches the rest (a
    torn write on a filesystem that lies about fsync, bit rot).

    File layout (little-endian):
        header   128 bytes: magic "KDCKPT02", then the fields of
                 kd_checkpoint_meta_t, zero padding
        layout   uint32 n_tensors, then per tensor: name (32 bytes, NUL
                 padded), uint64 rows, uint64 cols; the whole model's
                 tensors in flat order, so a checkpoint names what it holds
        params   count float32
        state    n_state * count float32
        crc      uint32, CRC-32 of everything before it
    A keyed (sparse) range holds only the rows some gradient touched.  Its
    header says so with key_dim > 0 (the values per key) and key_rows (the
    rows held), its layout is the one keyed tensor (n_params keys of
    key_dim values), and params and state are replaced by
        keys     key_rows uint64, each inside [lo, hi), in no set order
        rows     key_rows rows of (1 + n_state) * key_dim float32: a row's
                 values, then its optimizer state buffers (kd_sparse_arena)
    Version 1 files ("KDCKPT01", written before optimizers were chosen per
    run) are read as n_state 1, the momentum buffer of SGD.
    Files are named ckpt-<version, 20 digits>.kdc, so the newest sorts last.
*/
#ifndef KD_CHECKPOINT_H_INCLUDED
#define KD_CHECKPOINT_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kudus/kd_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KD_CHECKPOINT_HEADER   128
#define KD_CHECKPOINT_MAX_KEYS (1ULL << 32)    //  floats per range at most
#define KD_CHECKPOINT_MAX_STATE 2               //  optimizer state buffers at most
#define KD_CHECKPOINT_MAX_TENSORS 64            //  tensors in a layout at most

//  What a checkpoint says about itself.
typedef struct {
    uint64_t version;           //  model version of the range
    uint64_t samples;           //  samples trained into that version
    uint64_t rank;              //  shard rank
    uint64_t lo, hi;            //  key range [lo, hi)
    uint64_t n_params;          //  whole model's parameter count
    uint32_t kind;              //  kd_model_kind_t
    uint32_t hidden;            //  mlp hidden units
    uint64_t ts_ms;             //  wall clock ms when written
    uint32_t n_state;           //  optimizer state buffers (0..KD_CHECKPOINT_MAX_STATE)
    uint32_t opt_kind;          //  kd_opt_kind_t of the optimizer (0: unknown, v1)
    uint64_t opt_steps;         //  optimizer steps taken
    uint32_t n_tensors;         //  tensors in layout (0: unnamed, a v1 file)
    kd_tensor_t tensors [KD_CHECKPOINT_MAX_TENSORS];   //  the model's layout
    uint32_t key_dim;           //  keyed range: values per key (0: dense)
    uint64_t key_rows;          //  keyed range: rows held
    uint64_t *keys;             //  keyed range: their keys (a read's are the
                                //  caller's to free; NULL when dense)
} kd_checkpoint_meta_t;

//  Write a checkpoint of hi - lo params and meta->n_state buffers of
//  state (one block of n_state * (hi - lo) floats; NULL when n_state is 0)
//  into dir, then delete all but the newest `keep` checkpoints.  A keyed
//  range (meta->key_dim > 0) writes meta->keys and, in params, its rows
//  (key_rows * (1 + n_state) * key_dim floats); state is unused.  Returns
//  0, or -1 with a reason in err.
int
    kd_checkpoint_write (const char *dir, const kd_checkpoint_meta_t *meta,
                         const float *params, const float *state,
                         int keep, char *err, size_t err_size);

//  Read and verify one checkpoint file.  On success returns 0 and sets
//  meta, params and state (a block of n_state * count floats, NULL when
//  n_state is 0): new arrays, caller frees.  A keyed range's rows come in
//  params, its keys in meta->keys (also the caller's to free), and state
//  is NULL.  Returns -1 if the file cannot
//  be read, -2 if it is malformed, truncated or fails its CRC.
int
    kd_checkpoint_read (const char *path, kd_checkpoint_meta_t *meta,
                        float **params, float **state,
                        char *err, size_t err_size);

//  Load the newest valid checkpoint in dir, skipping (and logging) corrupt
//  or truncated ones and deleting leftover temporary files.  Returns 0 and
//  fills meta, params, state and path (if not NULL); 1 if dir holds no
//  valid checkpoint; -1 if dir cannot be read.
int
    kd_checkpoint_load_latest (const char *dir, kd_checkpoint_meta_t *meta,
                               float **params, float **state,
                               char *path, size_t path_size,
                               char *err, size_t err_size);

//  Parse a --checkpoint-every value: "30s" (seconds) or "200" / "200v"
//  (versions).  Returns 0 and sets one of the two (the other 0), or -1.
int
    kd_checkpoint_parse_every (const char *text, double *seconds,
                               uint64_t *versions);

#ifdef __cplusplus
}
#endif

#endif
