/*  kd_log: one logging helper for every Kudus program.

    The level check is in the kd_log macro, before any formatting; this file
    only formats and writes whole lines, so lines from several processes
    sharing a pipe do not interleave mid-line.
*/
#include "kd_log.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

int kd_log_level_current = KD_LOG_INFO;
static char s_service [64] = "kudus";
//  Services run as actors in one process log under their own names.
static __thread char s_thread_service [64];

static const char *s_level_names [] = { "error", "warn", "info", "debug" };

//  Set the service name and level.
void
kd_log_init (const char *service, kd_log_level_t level)
{
    snprintf (s_service, sizeof s_service, "%s", service ? service : "kudus");
    kd_log_level_current = level;
}

//  Set the service name of the calling thread only.
void
kd_log_set_thread (const char *service)
{
    snprintf (s_thread_service, sizeof s_thread_service, "%s", service ? service : "");
}

//  Parse a level name.
int
kd_log_level_parse (const char *name)
{
    for (int i = 0; i < (int) (sizeof s_level_names / sizeof s_level_names [0]); i++)
        if (name && strcmp (name, s_level_names [i]) == 0)
            return i;
    return -1;
}

//  Format one line and write it with a single call.
void
kd_log_write (kd_log_level_t level, const char *format, ...)
{
    char line [2048];
    struct timeval tv;
    gettimeofday (&tv, NULL);
    struct tm tm;
    gmtime_r (&tv.tv_sec, &tm);
    int n = snprintf (line, sizeof line, "%02d:%02d:%02d.%03d %-5s %s: ",
                      tm.tm_hour, tm.tm_min, tm.tm_sec, (int) (tv.tv_usec / 1000),
                      s_level_names [level], *s_thread_service ? s_thread_service : s_service);
    va_list args;
    va_start (args, format);
    if (n > 0 && (size_t) n < sizeof line)
        vsnprintf (line + n, sizeof line - n, format, args);
    va_end (args);
    size_t len = strnlen (line, sizeof line - 2);
    line [len++] = '\n';
    fwrite (line, 1, len, stderr);
    fflush (stderr);
}
