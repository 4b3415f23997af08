/*  kd_json: MessagePack to JSON, for `kudus tail --json` and the tools that
    read the monitor's stream.
*/
#include "kd_cli.h"
#include <math.h>

//  Append a JSON string literal.
static void
s_put_string (FILE *out, const char *s, size_t len)
{
    fputc ('"', out);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char) s [i];
        if (c == '"' || c == '\\')
            fprintf (out, "\\%c", c);
        else
        if (c < 0x20)
            fprintf (out, "\\u%04x", c);
        else
            fputc (c, out);
    }
    fputc ('"', out);
}

//  Append one object.
static void
s_put (FILE *out, const msgpack_object *o)
{
    switch (o->type) {
        case MSGPACK_OBJECT_NIL: fputs ("null", out); break;
        case MSGPACK_OBJECT_BOOLEAN: fputs (o->via.boolean ? "true" : "false", out); break;
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            fprintf (out, "%llu", (unsigned long long) o->via.u64); break;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER:
            fprintf (out, "%lld", (long long) o->via.i64); break;
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
            if (isfinite (o->via.f64))
                fprintf (out, "%.10g", o->via.f64);
            else
                fputs ("null", out);
            break;
        case MSGPACK_OBJECT_STR: s_put_string (out, o->via.str.ptr, o->via.str.size); break;
        case MSGPACK_OBJECT_BIN: {
            fputc ('"', out);
            for (uint32_t i = 0; i < o->via.bin.size; i++)
                fprintf (out, "%02x", (unsigned char) o->via.bin.ptr [i]);
            fputc ('"', out);
            break;
        }
        case MSGPACK_OBJECT_ARRAY:
            fputc ('[', out);
            for (uint32_t i = 0; i < o->via.array.size; i++) {
                if (i)
                    fputc (',', out);
                s_put (out, &o->via.array.ptr [i]);
            }
            fputc (']', out);
            break;
        case MSGPACK_OBJECT_MAP:
            fputc ('{', out);
            for (uint32_t i = 0; i < o->via.map.size; i++) {
                const msgpack_object *k = &o->via.map.ptr [i].key;
                if (i)
                    fputc (',', out);
                if (k->type == MSGPACK_OBJECT_STR)
                    s_put_string (out, k->via.str.ptr, k->via.str.size);
                else {
                    //  JSON keys are strings: render other keys as text.
                    char *buf = NULL;
                    size_t len = 0;
                    FILE *tmp = open_memstream (&buf, &len);
                    s_put (tmp, k);
                    fclose (tmp);
                    s_put_string (out, buf, len);
                    free (buf);
                }
                fputc (':', out);
                s_put (out, &o->via.map.ptr [i].val);
            }
            fputc ('}', out);
            break;
        default: fputs ("null", out);
    }
}

char *
kd_json_from_msgpack (const void *data, size_t size, const char *topic)
{
    if (kd_msgpack_validate ((const uint8_t *) data, size, 16) != 0)
        return NULL;
    msgpack_unpacked result;
    msgpack_unpacked_init (&result);
    char *buf = NULL;
    if (msgpack_unpack_next (&result, (const char *) data, size, NULL) == MSGPACK_UNPACK_SUCCESS) {
        size_t len = 0;
        FILE *out = open_memstream (&buf, &len);
        const msgpack_object *o = &result.data;
        if (topic && o->type == MSGPACK_OBJECT_MAP) {
            fputs ("{\"topic\":", out);
            s_put_string (out, topic, strlen (topic));
            for (uint32_t i = 0; i < o->via.map.size; i++) {
                fputc (',', out);
                const msgpack_object *k = &o->via.map.ptr [i].key;
                if (k->type == MSGPACK_OBJECT_STR)
                    s_put_string (out, k->via.str.ptr, k->via.str.size);
                else
                    fputs ("\"?\"", out);
                fputc (':', out);
                s_put (out, &o->via.map.ptr [i].val);
            }
            fputc ('}', out);
        }
        else
            s_put (out, o);
        fclose (out);
    }
    msgpack_unpacked_destroy (&result);
    return buf;
}

const msgpack_object *
kd_mp_find (const msgpack_object *map, const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    size_t len = strlen (key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr [i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == len
        &&  memcmp (k->via.str.ptr, key, len) == 0)
            return &map->via.map.ptr [i].val;
    }
    return NULL;
}

double
kd_mp_number (const msgpack_object *map, const char *key, double fallback)
{
    const msgpack_object *v = kd_mp_find (map, key);
    if (!v)
        return fallback;
    switch (v->type) {
        case MSGPACK_OBJECT_POSITIVE_INTEGER: return (double) v->via.u64;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER: return (double) v->via.i64;
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64: return v->via.f64;
        case MSGPACK_OBJECT_BOOLEAN: return v->via.boolean;
        default: return fallback;
    }
}

const char *
kd_mp_string (const msgpack_object *map, const char *key, char *buf, size_t size)
{
    const msgpack_object *v = kd_mp_find (map, key);
    if (!v || v->type != MSGPACK_OBJECT_STR) {
        snprintf (buf, size, "-");
        return buf;
    }
    snprintf (buf, size, "%.*s", (int) v->via.str.size, v->via.str.ptr);
    return buf;
}
