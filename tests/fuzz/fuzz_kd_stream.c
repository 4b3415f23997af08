/*  libFuzzer harness for kd_stream_decode: the first byte picks the topic,
    the rest is the MessagePack body.  A decode must return 0 or -2, never
    crash, and a message it accepts must encode and decode again to the
    same JSON.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kd_stream.h"

static char *
s_json (kd_stream_t *s)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream (&text, &len);
    kd_stream_print_json (s, f);
    fclose (f);
    return text;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char *topics [] = { "stats", "worker", "groups", "event" };
    const char *topic = topics [data [0] % 4];
    kd_stream_t *s = NULL;
    char err [256] = "";
    int rc = kd_stream_decode (topic, strlen (topic), data + 1, size - 1, &s, err, sizeof err);
    if (rc != 0 && rc != -2)
        abort ();
    if (rc == -2 && (s || !err [0]))
        abort ();
    if (rc == 0) {
        zmsg_t *msg = NULL;
        kd_stream_encode (s, &msg);
        zframe_t *t = zmsg_first (msg), *b = zmsg_next (msg);
        kd_stream_t *again = NULL;
        if (kd_stream_decode ((const char *) zframe_data (t), zframe_size (t), zframe_data (b),
                              zframe_size (b), &again, err, sizeof err) != 0)
            abort ();
        char *x = s_json (s), *y = s_json (again);
        if (strcmp (x, y) != 0)
            abort ();
        free (x);
        free (y);
        kd_stream_destroy (&again);
        zmsg_destroy (&msg);
    }
    kd_stream_destroy (&s);
    return 0;
}
