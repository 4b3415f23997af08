/*  kd_cli: the subcommands of the kudus command-line tool.
*/
#ifndef KD_CLI_H_INCLUDED
#define KD_CLI_H_INCLUDED
#include "kd_internal.h"
#include <msgpack.h>

//  kudus local: a whole cluster as child processes on loopback.
int
    kd_local_main (int argc, char **argv);

//  kudus experiment FILE: every run of a scenario file (kd_experiment.c).
int
    kd_experiment_main (int argc, char **argv);

//  kudus tail ENDPOINT: follow the monitor's stream.
int
    kd_tail_main (int argc, char **argv);

//  kudus keygen DIR: the CURVE keys of a cluster.
int
    kd_keygen_main (int argc, char **argv);

//  Render a MessagePack object as JSON into a new string (caller frees).
//  If topic is not NULL and the object is a map, a "topic" key is added
//  first.  Returns NULL if the bytes are malformed.
char *
    kd_json_from_msgpack (const void *data, size_t size, const char *topic);

//  Read one key of a MessagePack map as a number / string; return fallback
//  when absent.  The object must come from a successful unpack.
double
    kd_mp_number (const msgpack_object *map, const char *key, double fallback);
const char *
    kd_mp_string (const msgpack_object *map, const char *key, char *buf, size_t size);
const msgpack_object *
    kd_mp_find (const msgpack_object *map, const char *key);

#endif
