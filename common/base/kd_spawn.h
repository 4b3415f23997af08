/*  kd_spawn: start a program as a child process, the one way Kudus does it.

    Every place that runs a Kudus binary or a system tool (the local
    cluster, experiments, benchmarks, network namespaces, the tests) needs
    the same few things: the child dies with its parent, its output goes to
    a pipe, a file or stays where it is, Ctrl-C may be left to the parent,
    and a failed exec says so and exits 127.  Fill a kd_spawn_t from
    KD_SPAWN_INIT and set what differs.
*/
#ifndef KD_SPAWN_H_INCLUDED
#define KD_SPAWN_H_INCLUDED

#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *path;               //  the program; NULL: argv [0]
    const char *const *argv;        //  argv [0] included, NULL-terminated
    bool search;                    //  look the program up in PATH
    int out_fd;                     //  the child's stdout, or -1 to keep ours
    int err_fd;                     //  the child's stderr, or -1 to keep ours
    const char *out_file;           //  else stdout to this file (created)
    const char *err_file;           //  else stderr to this file; the same
                                    //  name as out_file shares one descriptor
    bool append;                    //  append to the files instead of truncating
    bool out_to_err;                //  stdout joins stderr (when neither is set)
    int death_signal;               //  sent to the child when we die (0: none)
    bool ignore_sigint;             //  Ctrl-C reaches only us; we stop the child
    int (*before_exec) (void *arg); //  runs in the child; non-zero: exit 127
    void *arg;                      //  for before_exec
} kd_spawn_t;

#define KD_SPAWN_INIT { .out_fd = -1, .err_fd = -1, .death_signal = SIGKILL }

//  Fork and exec.  Returns the child's pid, or -1 when fork failed.
pid_t
    kd_spawn (const kd_spawn_t *how);

#ifdef __cplusplus
}
#endif

#endif
