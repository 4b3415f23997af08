/*  kudus.h: the public API of libkudus.

    #include <kudus/kudus.h>, and link with `pkg-config --libs kudus` or
    CMake's find_package (kudus) and target kudus::kudus.

    kd_client   a worker's link to a cluster: register, pull, push, arrive
    kd_dataset  IDX image and label files (Fashion-MNIST's format)
    kd_tensor   a named tensor of a model's flat parameter vector

    Everything else under the source tree's include/ is internal to the
    Kudus services and is not installed.
*/
#ifndef KUDUS_H_INCLUDED
#define KUDUS_H_INCLUDED

#define KUDUS_VERSION_MAJOR 0
#define KUDUS_VERSION_MINOR 1
#define KUDUS_VERSION_PATCH 0
#define KUDUS_VERSION_STRING "0.1.0"

#include "kd_tensor.h"
#include "kd_dataset.h"
#include "kd_libsvm.h"
#include "kd_client.h"

#ifdef __cplusplus
extern "C" {
#endif

//  The library's version, "MAJOR.MINOR.PATCH", which may differ from the
//  header's KUDUS_VERSION_STRING when a program runs against a newer one.
const char *
    kudus_version (void);

#ifdef __cplusplus
}
#endif

#endif
