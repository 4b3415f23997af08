/*  kd_history: a run's history, appended as JSON lines (docs/chaos.md).

    The scheduler writes every lease it hands out and every commit it
    decides; a shard every commit it applies, every state it receives and
    its final CRC; `kudus local` every restart.  `kudus chaos` reads them
    all back and checks that each row was applied exactly once
    (kd_history_check).

    Each line is one write (2) on a file opened with O_APPEND, so a kill -9
    loses at most the line in flight, and a restarted process appends to
    the lines its predecessor wrote.  Every line starts with the wall clock
    in microseconds and the writer's pid: {"t":..., "pid":..., "ev":"...", ...}.
*/
#ifndef KD_HISTORY_H_INCLUDED
#define KD_HISTORY_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KD_HISTORY_MAX_LINE  65536      //  longest line; a longer one is cut
                                        //  and marked "truncated"

typedef struct _kd_history_t kd_history_t;

//  Open (create, append to) a history file.  NULL when path is empty or
//  the file cannot be opened (errno says why).  Caller owns return value.
kd_history_t *
    kd_history_new (const char *path);

//  Close and null the caller's pointer.
void
    kd_history_destroy (kd_history_t **self_p);

//  Append one line: the event ev, then the members fmt gives (JSON text
//  without braces, e.g. "\"version\":%llu", or "" for none).  A NULL
//  self is a no-op, so callers need not test for an opt-in history.
//  Returns 0, or -1 when the write failed.
int
    kd_history_line (kd_history_t *self, const char *ev, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

//  Append a JSON array of n integers to buf at *len (never past size);
//  a helper for lines that name gradients.
void
    kd_history_uints (char *buf, size_t size, size_t *len, const uint64_t *v, size_t n);

//  Wall clock in microseconds, the "t" of every line.
uint64_t
    kd_history_now_us (void);

#ifdef __cplusplus
}
#endif

#endif
