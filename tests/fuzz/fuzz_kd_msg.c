/*  fuzz_kd_msg: libFuzzer harness for the wire decoder.

    Each input is decoded twice: once whole, as the header frame of a message
    without a routing id, and once split into frames at every occurrence of
    the separator "\n--\n", routed when the input's first byte is odd.  The
    decoder must return 0 or -2, and ASan watches for everything else.  Not
    part of the CMake build; build and run it by hand:

        clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
            -Iinclude -Icommon/wire \
            common/wire/kd_msg.c common/wire/kd_half.c common/wire/kd_bundle.c tests/fuzz/fuzz_kd_msg.c \
            $(pkg-config --cflags --libs libczmq libzmq msgpack) -o /tmp/fuzz_kd_msg
        /tmp/fuzz_kd_msg -max_len=4096 tests/fuzz/corpus/kd_msg
*/
#define _GNU_SOURCE         //  memmem
#include "kd_msg.h"
#include "kd_bundle.h"
#include <stdlib.h>
#include <string.h>

#define S_SEPARATOR "\n--\n"

//  Decode one zmsg and insist on the contract.
static void
s_decode (zmsg_t *zmsg, bool routed)
{
    kd_msg_t *msg = NULL;
    zframe_t *routing = NULL;
    kd_msg_err_t err;
    int rc = kd_msg_decode (&zmsg, routed, &msg, &routing, &err);
    if ((rc != 0 && rc != -2) || zmsg || (rc == 0) != (msg != NULL))
        abort ();
    if (rc == 0) {
        //  Touch what a service would read.
        size_t count = 0;
        const float *values = kd_msg_data_floats (msg, &count);
        volatile float sink = 0;
        for (size_t i = 0; values && i < count; i++)
            sink += values [i];
        (void) sink;
        //  Keys, decoded from a delta frame or plain, as a shard reads
        //  them: increasing, and as many as the header says.
        size_t n_keys = 0;
        const uint64_t *keys = kd_msg_keys (msg, &n_keys);
        for (size_t i = 1; keys && i < n_keys; i++)
            if (keys [i - 1] >= keys [i])
                abort ();
        if (keys && n_keys != kd_msg_uint (msg, KD_F_KEYS))
            abort ();
        //  A RELAY's items, as the scheduler and an aggregator read them.
        size_t offset = 0, index = 0;
        kd_bundle_item_t item;
        char reason [160];
        while (kd_msg_type (msg) == KD_MSG_RELAY
        &&     kd_bundle_next (msg, &offset, &index, &item, reason, sizeof reason) == 0) {
            kd_msg_t *inner = NULL;
            int irc = kd_bundle_decode (&item, &inner, NULL);
            if ((irc != 0 && irc != -2) || (irc == 0) != (inner != NULL))
                abort ();
            kd_msg_destroy (&inner);
        }
    }
    else
    if (strnlen (err.reason, sizeof err.reason) == sizeof err.reason)
        abort ();
    kd_msg_destroy (&msg);
    zframe_destroy (&routing);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

//  libFuzzer entry point.
int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
    zmsg_t *whole = zmsg_new ();
    zmsg_addmem (whole, data, size);
    s_decode (whole, false);

    zmsg_t *split = zmsg_new ();
    const uint8_t *p = data, *end = data + size;
    size_t sep = strlen (S_SEPARATOR);
    while (p <= end) {
        const uint8_t *next = (const uint8_t *) memmem (p, (size_t) (end - p),
                                                        S_SEPARATOR, sep);
        if (!next)
            next = end;
        zmsg_addmem (split, p, (size_t) (next - p));
        p = next + sep;
    }
    s_decode (split, size > 0 && (data [0] & 1));
    return 0;
}
