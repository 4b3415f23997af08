/*  kd_metrics: the monitor's Prometheus endpoint (see kd_metrics.h).
*/
#include "kd_metrics.h"
#include "kd_log.h"
#include "kd_util.h"
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct _kd_metrics_t {
    struct MHD_Daemon *daemon;  //  the HTTP server
    pthread_mutex_t lock;       //  guards text
    char *text;                 //  the last exposition, owned
    size_t len;                 //  its length
    int port;                   //  port served
};

//  One request: GET /metrics gets the text, anything else a 404 or 405.
static enum MHD_Result
s_handle (void *cls, struct MHD_Connection *conn, const char *url, const char *method,
          const char *version, const char *upload_data, size_t *upload_size, void **req_cls)
{
    (void) version, (void) upload_data, (void) upload_size, (void) req_cls;
    kd_metrics_t *self = (kd_metrics_t *) cls;
    struct MHD_Response *response;
    unsigned int status = MHD_HTTP_OK;
    if (strcmp (method, "GET") != 0 && strcmp (method, "HEAD") != 0) {
        static const char msg [] = "only GET /metrics\n";
        response = MHD_create_response_from_buffer (sizeof msg - 1, (void *) msg, MHD_RESPMEM_PERSISTENT);
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
    }
    else
    if (strcmp (url, "/metrics") != 0) {
        static const char msg [] = "not found: the metrics are at /metrics\n";
        response = MHD_create_response_from_buffer (sizeof msg - 1, (void *) msg, MHD_RESPMEM_PERSISTENT);
        status = MHD_HTTP_NOT_FOUND;
    }
    else {
        pthread_mutex_lock (&self->lock);
        response = MHD_create_response_from_buffer (self->len, self->text ? self->text : (char *) "",
                                                    MHD_RESPMEM_MUST_COPY);
        pthread_mutex_unlock (&self->lock);
    }
    if (!response)
        return MHD_NO;
    MHD_add_response_header (response, "Content-Type", status == MHD_HTTP_OK ? S_CONTENT_TYPE : "text/plain");
    enum MHD_Result rc = MHD_queue_response (conn, status, response);
    MHD_destroy_response (response);
    return rc;
}

kd_metrics_t *
kd_metrics_new (const char *bind, char *err, size_t err_size)
{
    struct sockaddr_in addr;
    char why [256];
    if (kd_parse_listen (bind, &addr, why, sizeof why)) {
        snprintf (err, err_size, "metrics bind %s", why);
        return NULL;
    }
    //  HTTP has no CURVE: beyond loopback anyone who reaches it reads them.
    if (ntohl (addr.sin_addr.s_addr) >> 24 != 127)
        kd_warn ("metrics at %s are served to any host that reaches it, without authentication", bind);
    kd_metrics_t *self = (kd_metrics_t *) calloc (1, sizeof *self);
    assert (self);
    pthread_mutex_init (&self->lock, NULL);
    self->daemon = MHD_start_daemon (MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, ntohs (addr.sin_port),
                                     NULL, NULL, s_handle, self,
                                     MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &addr,
                                     MHD_OPTION_CONNECTION_LIMIT, (unsigned int) 64,
                                     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int) 10,
                                     MHD_OPTION_END);
    if (!self->daemon) {
        snprintf (err, err_size, "metrics bind '%s': cannot listen (%s)", bind, strerror (errno));
        pthread_mutex_destroy (&self->lock);
        free (self);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info (self->daemon, MHD_DAEMON_INFO_BIND_PORT);
    self->port = info ? info->port : (int) ntohs (addr.sin_port);
    return self;
}

void
kd_metrics_destroy (kd_metrics_t **self_p)
{
    assert (self_p);
    kd_metrics_t *self = *self_p;
    if (!self)
        return;
    MHD_stop_daemon (self->daemon);
    pthread_mutex_destroy (&self->lock);
    free (self->text);
    free (self);
    *self_p = NULL;
}

void
kd_metrics_update (kd_metrics_t *self, const char *text, size_t len)
{
    assert (self && text);
    char *copy = (char *) malloc (len + 1);
    assert (copy);
    memcpy (copy, text, len);
    copy [len] = 0;
    pthread_mutex_lock (&self->lock);
    char *old = self->text;
    self->text = copy;
    self->len = len;
    pthread_mutex_unlock (&self->lock);
    free (old);
}

int
kd_metrics_port (kd_metrics_t *self)
{
    assert (self);
    return self->port;
}
