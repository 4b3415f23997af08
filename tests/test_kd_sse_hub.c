/*  test_kd_sse_hub: the dashboard's event fan-out.

    Readers see events in publishing order from their cursor; a slot keeps
    only its latest event; a full log drops its oldest events and a reader
    left behind skips ahead; a read times out, and close wakes a waiting
    reader.  A random test checks every read against a plain model of the
    log.
*/
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kd_sse_hub.h"

TestSuite (kd_sse_hub);

static void
s_publish (kd_sse_hub_t *hub, const char *text, int slot)
{
    cr_assert_eq (kd_sse_hub_publish (hub, text, strlen (text), slot), 0);
}

//  Read the next event and expect its text.
static void
s_expect_next (kd_sse_hub_t *hub, uint64_t *cursor, const char *expected)
{
    char *text = NULL;
    size_t len = 0;
    int rc = kd_sse_hub_read (hub, cursor, &text, &len, 0);
    cr_assert_eq (rc, 1, "no event where '%s' was expected", expected);
    cr_expect_str_eq (text, expected);
    cr_expect_eq (len, strlen (expected));
    free (text);
}

static void
s_expect_none (kd_sse_hub_t *hub, uint64_t *cursor)
{
    char *text = NULL;
    size_t len = 0;
    int rc = kd_sse_hub_read (hub, cursor, &text, &len, 10);
    cr_expect_eq (rc, 0, "an event '%s' where none was expected", rc == 1 ? text : "");
    if (rc == 1)
        free (text);
}

Test (kd_sse_hub, order_and_replay)
{
    kd_sse_hub_t *hub = kd_sse_hub_new (100, 8);
    s_publish (hub, "a", -1);
    s_publish (hub, "b", -1);
    uint64_t live = 0;
    s_expect_next (hub, &live, "a");
    s_expect_next (hub, &live, "b");
    s_expect_none (hub, &live);
    s_publish (hub, "c", -1);
    s_expect_next (hub, &live, "c");
    //  A late reader replays everything.
    uint64_t late = 0;
    s_expect_next (hub, &late, "a");
    s_expect_next (hub, &late, "b");
    s_expect_next (hub, &late, "c");
    cr_expect_eq (kd_sse_hub_published (hub), 3);
    kd_sse_hub_destroy (&hub);
    cr_expect_null (hub);
}

Test (kd_sse_hub, slots_keep_the_latest)
{
    kd_sse_hub_t *hub = kd_sse_hub_new (100, 8);
    s_publish (hub, "stats 1", -1);
    s_publish (hub, "worker 3 first", 3);
    s_publish (hub, "worker 5", 5);
    s_publish (hub, "worker 3 second", 3);
    s_publish (hub, "stats 2", -1);
    cr_expect_eq (kd_sse_hub_size (hub), 4);
    uint64_t cursor = 0;
    s_expect_next (hub, &cursor, "stats 1");
    s_expect_next (hub, &cursor, "worker 5");
    s_expect_next (hub, &cursor, "worker 3 second");
    s_expect_next (hub, &cursor, "stats 2");
    s_expect_none (hub, &cursor);
    //  Out of range slots are refused, and nothing is kept.
    cr_expect_eq (kd_sse_hub_publish (hub, "x", 1, 8), -1);
    cr_expect_eq (kd_sse_hub_publish (hub, "x", 1, -2), -1);
    cr_expect_eq (kd_sse_hub_size (hub), 4);
    kd_sse_hub_destroy (&hub);
}

Test (kd_sse_hub, full_log_drops_the_oldest)
{
    kd_sse_hub_t *hub = kd_sse_hub_new (3, 1);
    uint64_t slow = 0;
    s_publish (hub, "1", -1);
    s_expect_next (hub, &slow, "1");
    for (int i = 2; i <= 6; i++) {
        char text [8];
        snprintf (text, sizeof text, "%d", i);
        s_publish (hub, text, -1);
    }
    cr_expect_eq (kd_sse_hub_size (hub), 3);
    //  The reader left behind skips to the oldest kept.
    s_expect_next (hub, &slow, "4");
    s_expect_next (hub, &slow, "5");
    s_expect_next (hub, &slow, "6");
    kd_sse_hub_destroy (&hub);
}

static void *
s_wait_reader (void *arg)
{
    kd_sse_hub_t *hub = (kd_sse_hub_t *) arg;
    uint64_t cursor = 0;
    char *text = NULL;
    size_t len = 0;
    intptr_t rc = kd_sse_hub_read (hub, &cursor, &text, &len, 30000);
    if (rc == 1)
        free (text);
    return (void *) rc;
}

Test (kd_sse_hub, publish_and_close_wake_readers)
{
    kd_sse_hub_t *hub = kd_sse_hub_new (10, 1);
    pthread_t thread;
    pthread_create (&thread, NULL, s_wait_reader, hub);
    usleep (50 * 1000);
    s_publish (hub, "wake", -1);
    void *rc;
    pthread_join (thread, &rc);
    cr_expect_eq ((intptr_t) rc, 1, "a publish did not wake the reader");

    kd_sse_hub_t *empty = kd_sse_hub_new (10, 1);
    pthread_create (&thread, NULL, s_wait_reader, empty);
    usleep (50 * 1000);
    kd_sse_hub_close (empty);
    pthread_join (thread, &rc);
    cr_expect_eq ((intptr_t) rc, -1, "close did not end the waiting read");
    kd_sse_hub_destroy (&empty);
    kd_sse_hub_destroy (&hub);
}

//  Random publishes and reads against a model: an array of (seq, text,
//  slot, live) in order, where a slot's publish kills its previous event
//  and a full log kills the oldest live one.
Test (kd_sse_hub, random_against_model)
{
    enum { MAX_EVENTS = 40, SLOTS = 6, OPS = 20000, READERS = 3 };
    kd_sse_hub_t *hub = kd_sse_hub_new (MAX_EVENTS, SLOTS);
    typedef struct { uint64_t seq; char text [24]; int slot; int live; } ev_t;
    ev_t *model = (ev_t *) calloc (OPS, sizeof (ev_t));
    size_t n = 0, live = 0;
    uint64_t cursors [READERS] = { 0 };
    srand (7);
    for (int op = 0; op < OPS; op++) {
        if (rand () % 3) {
            int slot = rand () % 4 == 0 ? -1 : rand () % SLOTS;
            if (rand () % 2)
                slot = -1;
            ev_t *e = &model [n];
            e->seq = n + 1;
            snprintf (e->text, sizeof e->text, "ev %d", op);
            e->slot = slot;
            if (slot >= 0)
                for (size_t i = 0; i < n; i++)
                    if (model [i].live && model [i].slot == slot) {
                        model [i].live = 0;
                        live--;
                    }
            for (size_t i = 0; live >= MAX_EVENTS && i < n; i++)
                if (model [i].live) {
                    model [i].live = 0;
                    live--;
                }
            e->live = 1;
            live++;
            n++;
            s_publish (hub, e->text, slot);
            cr_assert_eq (kd_sse_hub_size (hub), live);
        }
        else {
            int r = rand () % READERS;
            size_t next = 0;
            while (next < n && (model [next].seq <= cursors [r] || !model [next].live))
                next++;
            char *text = NULL;
            size_t len = 0;
            int rc = kd_sse_hub_read (hub, &cursors [r], &text, &len, 0);
            if (next == n)
                cr_assert_eq (rc, 0, "op %d: an event where the model has none", op);
            else {
                cr_assert_eq (rc, 1, "op %d: no event where the model has '%s'", op, model [next].text);
                cr_assert_str_eq (text, model [next].text, "op %d", op);
                cr_assert_eq (cursors [r], model [next].seq);
                free (text);
            }
        }
    }
    free (model);
    kd_sse_hub_destroy (&hub);
}
