/*  kd_dataset: IDX image and label files (MNIST's format), gzipped or not.

    Files are read through zlib's gzread, which passes plain files through,
    so both forms work.  Every header field is checked: magic, dimensions,
    and that the payload is as long as the header says.  Pixels are scaled to
    [0, 1] floats; labels must be below KD_CLASSES.
*/
#ifndef KD_DATASET_H_INCLUDED
#define KD_DATASET_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _kd_dataset_t kd_dataset_t;

//  Load rows [lo, hi) of an IDX image file and its label file.  hi = 0
//  means to the end.  Returns NULL on any error and writes a message naming
//  the file and the problem into err.  Caller owns return value.
kd_dataset_t *
    kd_dataset_load (const char *images_path, const char *labels_path,
                     size_t lo, size_t hi, char *err, size_t err_size);

//  Load "train" or "t10k" from a directory holding the four Fashion-MNIST
//  files (NAME-images-idx3-ubyte[.gz], NAME-labels-idx1-ubyte[.gz]).
kd_dataset_t *
    kd_dataset_load_dir (const char *dir, const char *name, size_t lo,
                         size_t hi, char *err, size_t err_size);

//  Destroy and null the caller's pointer.
void
    kd_dataset_destroy (kd_dataset_t **self_p);

size_t
    kd_dataset_count (kd_dataset_t *self);       //  rows loaded
size_t
    kd_dataset_total (kd_dataset_t *self);       //  rows in the file
size_t
    kd_dataset_dim (kd_dataset_t *self);         //  pixels per row
//  Row-major [count x dim] floats in [0, 1]; borrowed.
const float *
    kd_dataset_images (kd_dataset_t *self);
//  [count] labels; borrowed.
const uint8_t *
    kd_dataset_labels (kd_dataset_t *self);

#ifdef __cplusplus
}
#endif

#endif
