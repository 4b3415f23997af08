/*  kd_history: a run's history, appended as JSON lines.  See kd_history.h.
*/
#include "kd_history.h"
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct _kd_history_t {
    int fd;                     //  opened O_APPEND
    char *line;                 //  scratch: one line, KD_HISTORY_MAX_LINE
};

kd_history_t *
kd_history_new (const char *path)
{
    if (!path || !*path) {
        errno = EINVAL;
        return NULL;
    }
    int fd = open (path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return NULL;
    kd_history_t *self = (kd_history_t *) calloc (1, sizeof (kd_history_t));
    assert (self);
    self->fd = fd;
    self->line = (char *) malloc (KD_HISTORY_MAX_LINE);
    assert (self->line);
    return self;
}

void
kd_history_destroy (kd_history_t **self_p)
{
    assert (self_p);
    kd_history_t *self = *self_p;
    if (!self)
        return;
    close (self->fd);
    free (self->line);
    free (self);
    *self_p = NULL;
}

uint64_t
kd_history_now_us (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

int
kd_history_line (kd_history_t *self, const char *ev, const char *fmt, ...)
{
    if (!self)
        return 0;
    char *buf = self->line;
    size_t size = KD_HISTORY_MAX_LINE - 32;     //  room for the cut's marker
    int n = snprintf (buf, size, "{\"t\":%llu,\"pid\":%d,\"ev\":\"%s\"",
                      (unsigned long long) kd_history_now_us (), (int) getpid (), ev);
    size_t len = (size_t) n;
    va_list args;
    va_start (args, fmt);
    if (*fmt) {
        buf [len++] = ',';
        int m = vsnprintf (buf + len, size - len, fmt, args);
        len = m < 0 ? len - 1 : len + (size_t) m;
    }
    va_end (args);
    if (len >= size) {
        //  Cut where it fits: a reader sees a valid line that says so.
        len = (size_t) snprintf (buf, size, "{\"t\":%llu,\"pid\":%d,\"ev\":\"%s\",\"truncated\":true",
                                 (unsigned long long) kd_history_now_us (), (int) getpid (), ev);
    }
    buf [len++] = '}';
    buf [len++] = '\n';
    //  One write: with O_APPEND the line lands whole after what others wrote.
    ssize_t w = write (self->fd, buf, len);
    return w == (ssize_t) len ? 0 : -1;
}

void
kd_history_uints (char *buf, size_t size, size_t *len, const uint64_t *v, size_t n)
{
    size_t at = *len;
    if (at < size)
        at += (size_t) snprintf (buf + at, size - at, "[");
    for (size_t i = 0; i < n && at < size; i++)
        at += (size_t) snprintf (buf + at, size - at, "%s%llu", i ? "," : "", (unsigned long long) v [i]);
    if (at < size)
        at += (size_t) snprintf (buf + at, size - at, "]");
    *len = at < size ? at : size;
}
