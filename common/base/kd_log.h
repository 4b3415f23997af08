/*  kd_log: one logging helper (Redis's serverLog).

    Lines are "TIME LEVEL service: event key=value ..." on stderr.  The
    level check runs before any formatting, so a debug line costs a compare
    when debug is off.
*/
#ifndef KD_LOG_H_INCLUDED
#define KD_LOG_H_INCLUDED

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KD_LOG_ERROR,
    KD_LOG_WARN,
    KD_LOG_INFO,
    KD_LOG_DEBUG
} kd_log_level_t;

extern int kd_log_level_current;

//  Set the service name shown on every line, and the level.
void
    kd_log_init (const char *service, kd_log_level_t level);

//  Set the service name of the calling thread's lines only (a service run
//  as an actor); an empty name falls back to kd_log_init's.
void
    kd_log_set_thread (const char *service);

//  Parse "error", "warn", "info", "debug"; -1 if unknown.
int
    kd_log_level_parse (const char *name);

//  Write one line; use the macros instead.
void
    kd_log_write (kd_log_level_t level, const char *format, ...)
    __attribute__ ((format (printf, 2, 3)));

#define kd_log(level, ...) \
    do { if ((int) (level) <= kd_log_level_current) \
            kd_log_write ((level), __VA_ARGS__); } while (0)
#define kd_error(...) kd_log (KD_LOG_ERROR, __VA_ARGS__)
#define kd_warn(...)  kd_log (KD_LOG_WARN, __VA_ARGS__)
#define kd_info(...)  kd_log (KD_LOG_INFO, __VA_ARGS__)
#define kd_debug(...) kd_log (KD_LOG_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif
