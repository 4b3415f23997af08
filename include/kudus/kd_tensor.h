/*  kd_tensor: one named tensor of a model's flat parameter vector.  Public.

    A model is a list of named float32 tensors laid end to end; shards hold
    contiguous key ranges of the flat vector, so a tensor may span shards.
*/
#ifndef KD_TENSOR_H_INCLUDED
#define KD_TENSOR_H_INCLUDED

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Longest tensor name, NUL included.
#define KD_TENSOR_NAME_MAX 32

//  A named run of floats in the flat vector, row-major.
typedef struct {
    char name [KD_TENSOR_NAME_MAX];     //  "W1", "b1", ...
    size_t offset;                      //  first float in the flat vector
    size_t count;                       //  floats in it: rows * cols
    size_t rows, cols;                  //  shape (cols = 1 for a vector)
} kd_tensor_t;

#ifdef __cplusplus
}
#endif

#endif
