/*  kd_metrics: the monitor's Prometheus endpoint, GET /metrics.

    libmicrohttpd serves it from its own thread.  The monitor renders the
    exposition text in its loop (kd_metrics_update) and the handler copies
    the last one out under a mutex, so the monitor's state is never read
    from another thread.
*/
#ifndef KD_METRICS_H_INCLUDED
#define KD_METRICS_H_INCLUDED

#include <stddef.h>

typedef struct _kd_metrics_t kd_metrics_t;

//  Serve on bind, "HOST:PORT", ":PORT" or "PORT" (HOST "*" or empty: every
//  address).  NULL with a reason in err when bind is malformed or the port
//  is taken.  Caller owns return value.
kd_metrics_t *
    kd_metrics_new (const char *bind, char *err, size_t err_size);

//  Stop serving and null the caller's pointer.
void
    kd_metrics_destroy (kd_metrics_t **self_p);

//  Replace the exposition text (copied).
void
    kd_metrics_update (kd_metrics_t *self, const char *text, size_t len);

//  The port served (for a bind of port 0).
int
    kd_metrics_port (kd_metrics_t *self);

#endif
