/*  kd_spawn: start a program as a child process, the one way Kudus does it.
*/
#include "kd_spawn.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

//  Open a file for a child's output; -1 when it cannot be.
static int
s_open (const char *file, bool append)
{
    return open (file, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0644);
}

//  In the child: everything between fork and exec.  Never returns.
static void
s_child (const kd_spawn_t *how, const char *path)
{
    if (how->death_signal)
        prctl (PR_SET_PDEATHSIG, how->death_signal);
    if (how->ignore_sigint)
        signal (SIGINT, SIG_IGN);
    int out = how->out_fd, err = how->err_fd;
    if (out < 0 && how->out_file)
        out = s_open (how->out_file, how->append);
    if (err < 0 && how->err_file)
        err = how->out_file && !strcmp (how->out_file, how->err_file) && out >= 0
            ? out : s_open (how->err_file, how->append);
    //  dup2 clears close-on-exec on the copy, so a pipe made with
    //  O_CLOEXEC reaches the program as its output and nowhere else.
    if (out >= 0)
        dup2 (out, STDOUT_FILENO);
    else
    if (how->out_to_err)
        dup2 (STDERR_FILENO, STDOUT_FILENO);
    if (err >= 0)
        dup2 (err, STDERR_FILENO);
    if (how->before_exec && how->before_exec (how->arg))
        _exit (127);
    if (how->search)
        execvp (path, (char *const *) how->argv);
    else
        execv (path, (char *const *) how->argv);
    fprintf (stderr, "cannot run %s: %s\n", path, strerror (errno));
    _exit (127);
}

pid_t
kd_spawn (const kd_spawn_t *how)
{
    const char *path = how->path ? how->path : how->argv [0];
    pid_t pid = fork ();
    if (pid == 0)
        s_child (how, path);
    return pid;
}
