/*  test_kd_controller: the consistency controller, driven directly.

    Two kinds of suites.  Scripted ones play short event sequences and check
    the exact decisions of each rule (barrier, quota, window, late weights,
    groups, hysteresis, join and leave).  Random ones drive every model with
    seeded event streams from simulated workers, which arrive with the clock
    and base they were released with, and check the invariants of
    docs/consistency.md after every event:

    1. no applied gradient is staler than its model's bound;
    2. every staged gradient is named exactly once, entries have positive
       weights, and versions grow by one per commit with entries;
    3. nothing is released early, and nobody waits while its release
       condition holds (no worker waits forever);
    4. the degenerate LSP settings give BSP's stream, backup workers and
       bounded-delay ASP;
    5. under SSP no worker computes a clock above min_clock + s.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kd_controller.h"

//  Ranks the random drivers use.
#define RANDOM_RANKS    12
//  Random events per run; the brief asks for at least 10,000 per model.
#define RANDOM_EVENTS   20000
//  Staged gradients a simulated worker may have at once (late + phase).
#define STAGED_SLOTS    4
//  Tolerance for weight sums.
#define EPS             1e-9


//  --------------------------------------------------------------------------
//  Recording decisions

//  A deep copy of one decision, so it outlives the controller's buffers.
typedef struct {
    kd_decision_type_t type;    //  what it is
    uint64_t version;           //  COMMIT/RELEASE version
    kd_entry_t *entries;        //  COMMIT entries (owned)
    size_t n_entries;           //  entries count
    kd_entry_t *drops;          //  COMMIT drops (owned)
    size_t n_drops;             //  drops count
    uint32_t rank;              //  RELEASE rank
    uint64_t clock;             //  RELEASE clock
    bool dropped;               //  RELEASE dropped flag
    uint32_t group;             //  RELEASE group
    uint32_t *groups;           //  GROUPS table (owned)
    size_t n_groups;            //  GROUPS table length
    uint32_t group_count;       //  GROUPS count
} rec_t;

//  A list of recorded decisions.
typedef struct {
    rec_t *recs;                //  the decisions
    size_t n;                   //  how many
    size_t cap;                 //  allocated
} log_t;

//  Free every decision in a log and empty it.
static void
log_clear (log_t *log)
{
    for (size_t i = 0; i < log->n; i++) {
        free (log->recs [i].entries);
        free (log->recs [i].drops);
        free (log->recs [i].groups);
    }
    log->n = 0;
}

//  Free a log.
static void
log_free (log_t *log)
{
    log_clear (log);
    free (log->recs);
    log->recs = NULL;
    log->cap = 0;
}

//  Copy n items of size bytes, NULL when n is 0.
static void *
s_copy (const void *src, size_t n, size_t size)
{
    if (n == 0)
        return NULL;
    void *dst = malloc (n * size);
    cr_assert (dst);
    memcpy (dst, src, n * size);
    return dst;
}

//  Move every pending decision of ctl into log (GROUPS skipped if asked).
static void
log_drain (log_t *log, kd_controller_t *ctl, bool skip_groups)
{
    const kd_decision_t *d;
    while ((d = kd_controller_next (ctl))) {
        if (skip_groups && d->type == KD_DEC_GROUPS)
            continue;
        if (log->n == log->cap) {
            log->cap = log->cap ? log->cap * 2 : 64;
            log->recs = realloc (log->recs, log->cap * sizeof (rec_t));
            cr_assert (log->recs);
        }
        rec_t *rec = &log->recs [log->n++];
        *rec = (rec_t) {
            .type = d->type, .version = d->version,
            .n_entries = d->n_entries, .n_drops = d->n_drops,
            .rank = d->rank, .clock = d->clock, .dropped = d->dropped,
            .group = d->group, .n_groups = d->n_groups,
            .group_count = d->group_count
        };
        rec->entries = s_copy (d->entries, d->n_entries, sizeof (kd_entry_t));
        rec->drops = s_copy (d->drops, d->n_drops, sizeof (kd_entry_t));
        rec->groups = s_copy (d->groups, d->n_groups, sizeof (uint32_t));
    }
}

//  True when two entries are the same, weights bit for bit.
static bool
s_entry_same (const kd_entry_t *a, const kd_entry_t *b)
{
    return a->rank == b->rank && a->clock == b->clock
        && a->weight == b->weight && a->staleness == b->staleness;
}

//  True when two recorded decisions are the same.
static bool
s_rec_same (const rec_t *a, const rec_t *b)
{
    if (a->type != b->type || a->version != b->version)
        return false;
    if (a->type == KD_DEC_COMMIT) {
        if (a->n_entries != b->n_entries || a->n_drops != b->n_drops)
            return false;
        for (size_t i = 0; i < a->n_entries; i++)
            if (!s_entry_same (&a->entries [i], &b->entries [i]))
                return false;
        for (size_t i = 0; i < a->n_drops; i++)
            if (!s_entry_same (&a->drops [i], &b->drops [i]))
                return false;
        return true;
    }
    if (a->type == KD_DEC_RELEASE)
        return a->rank == b->rank && a->clock == b->clock
            && a->dropped == b->dropped && a->group == b->group;
    return a->group_count == b->group_count && a->n_groups == b->n_groups
        && memcmp (a->groups, b->groups, a->n_groups * sizeof (uint32_t)) == 0;
}

//  Expect two logs to hold the same decisions.
static void
s_expect_same_logs (const log_t *a, const log_t *b, const char *what)
{
    cr_assert_eq (a->n, b->n, "%s: %zu decisions vs %zu", what, a->n, b->n);
    for (size_t i = 0; i < a->n; i++)
        cr_assert (s_rec_same (&a->recs [i], &b->recs [i]),
                   "%s: decision %zu differs (type %d vs %d)", what, i,
                   a->recs [i].type, b->recs [i].type);
}


//  --------------------------------------------------------------------------
//  Scripted helpers

static log_t s_log;              //  decisions of the last s_take

//  Drain ctl into s_log (replacing it) and return how many there were.
static size_t
s_take (kd_controller_t *ctl)
{
    log_clear (&s_log);
    log_drain (&s_log, ctl, false);
    return s_log.n;
}

//  Index in s_log of the RELEASE for rank, or -1.
static int
s_release_of (uint32_t rank)
{
    for (size_t i = 0; i < s_log.n; i++)
        if (s_log.recs [i].type == KD_DEC_RELEASE && s_log.recs [i].rank == rank)
            return (int) i;
    return -1;
}

//  Number of decisions of a type in s_log.
static size_t
s_count (kd_decision_type_t type)
{
    size_t count = 0;
    for (size_t i = 0; i < s_log.n; i++)
        count += s_log.recs [i].type == type;
    return count;
}

//  The first decision of a type in s_log; fails if none.
static rec_t *
s_first (kd_decision_type_t type)
{
    for (size_t i = 0; i < s_log.n; i++)
        if (s_log.recs [i].type == type)
            return &s_log.recs [i];
    cr_assert_fail ("no decision of type %d", type);
    return NULL;
}

//  The last decision of a type in s_log; fails if none.
static rec_t *
s_last (kd_decision_type_t type)
{
    for (size_t i = s_log.n; i-- > 0; )
        if (s_log.recs [i].type == type)
            return &s_log.recs [i];
    cr_assert_fail ("no decision of type %d", type);
    return NULL;
}

//  Expect s_log to hold a RELEASE for rank with version and clock.
static void
s_expect_release (uint32_t rank, uint64_t version, uint64_t clock)
{
    int i = s_release_of (rank);
    cr_assert (i >= 0, "no RELEASE for rank %u", rank);
    cr_expect_eq (s_log.recs [i].version, version, "rank %u version %lu != %lu",
                  rank, (unsigned long) s_log.recs [i].version,
                  (unsigned long) version);
    cr_expect_eq (s_log.recs [i].clock, clock, "rank %u clock %lu != %lu",
                  rank, (unsigned long) s_log.recs [i].clock,
                  (unsigned long) clock);
}

//  Entry for (rank, clock) in a commit, or NULL.
static const kd_entry_t *
s_entry_of (const rec_t *commit, uint32_t rank, uint64_t clock)
{
    for (size_t i = 0; i < commit->n_entries; i++)
        if (commit->entries [i].rank == rank && commit->entries [i].clock == clock)
            return &commit->entries [i];
    return NULL;
}

//  A controller with default options for model, changed by the caller.
static kd_controller_t *
s_new (kd_consistency_t model, kd_controller_opts_t *opts_out,
       void (*tweak) (kd_controller_opts_t *))
{
    kd_controller_opts_t opts;
    kd_controller_opts_defaults (&opts, model);
    if (tweak)
        tweak (&opts);
    if (opts_out)
        *opts_out = opts;
    kd_controller_t *ctl = kd_controller_new (&opts);
    cr_assert (ctl);
    return ctl;
}

//  Join ranks 0 .. n-1 at time now, expecting each to be released at once.
static void
s_join_all (kd_controller_t *ctl, uint32_t n, uint64_t now)
{
    for (uint32_t rank = 0; rank < n; rank++)
        cr_assert_eq (kd_controller_join (ctl, rank, now), 0);
    s_take (ctl);
    for (uint32_t rank = 0; rank < n; rank++)
        cr_assert (s_release_of (rank) >= 0, "rank %u not released", rank);
}

//  Arrive and expect success.
static void
s_arrive (kd_controller_t *ctl, uint32_t rank, uint64_t clock, uint64_t base,
          uint64_t now)
{
    cr_assert_eq (kd_controller_arrive (ctl, rank, clock, base, 32, now), 0,
                  "arrive rank %u clock %lu base %lu refused", rank,
                  (unsigned long) clock, (unsigned long) base);
}

//  Sum of a commit's entry weights.
static double
s_weight_sum (const rec_t *commit)
{
    double sum = 0;
    for (size_t i = 0; i < commit->n_entries; i++)
        sum += commit->entries [i].weight;
    return sum;
}

//  Suite teardown: free the scripted log.
static void
s_teardown (void)
{
    log_free (&s_log);
}

TestSuite (kd_controller, .fini = s_teardown);


//  --------------------------------------------------------------------------
//  Options, names, construction

Test (kd_controller, opts_defaults_and_names)
{
    kd_controller_opts_t opts;
    kd_controller_opts_defaults (&opts, KD_CONS_LSP);
    cr_expect_eq (opts.model, KD_CONS_LSP);
    cr_expect_eq (opts.staleness, 3);
    cr_expect_eq (opts.quota, 0);
    cr_expect_float_eq (opts.quota_ratio, 0.75, 1e-12);
    cr_expect_eq (opts.window_ms, 0);
    cr_expect_float_eq (opts.group_ratio, 1.3, 1e-12);
    cr_expect_eq (opts.min_group, 2);
    cr_expect_eq (opts.max_groups, 4);
    cr_expect_eq (opts.global_sync_every, 8);
    cr_expect_eq (opts.regroup_dwell_ms, 10000);
    cr_expect_eq (opts.max_workers, 1024);

    const char *names [] = { "bsp", "asp", "ssp", "lsp", "alsp" };
    for (int i = 0; i < 5; i++) {
        cr_expect_eq (kd_consistency_parse (names [i]), i);
        cr_expect_str_eq (kd_consistency_name ((kd_consistency_t) i), names [i]);
    }
    cr_expect_eq (kd_consistency_parse ("ALSP"), KD_CONS_ALSP);
    cr_expect_eq (kd_consistency_parse ("bulk"), -1);
    cr_expect_eq (kd_consistency_parse (""), -1);
    cr_expect_eq (kd_consistency_parse (NULL), -1);
}

Test (kd_controller, new_rejects_invalid_opts)
{
    kd_controller_opts_t opts;
    kd_controller_opts_defaults (&opts, KD_CONS_BSP);
    kd_controller_opts_t bad = opts;
    bad.max_workers = 0;
    cr_expect_null (kd_controller_new (&bad));
    bad = opts;
    bad.quota_ratio = 0;
    cr_expect_null (kd_controller_new (&bad));
    bad = opts;
    bad.quota_ratio = 1.5;
    cr_expect_null (kd_controller_new (&bad));
    bad = opts;
    bad.quota_ratio = NAN;
    cr_expect_null (kd_controller_new (&bad));
    bad = opts;
    bad.group_ratio = 1.0;
    cr_expect_null (kd_controller_new (&bad));
    bad = opts;
    bad.min_group = 0;
    cr_expect_null (kd_controller_new (&bad));
    bad = opts;
    bad.max_groups = 0;
    cr_expect_null (kd_controller_new (&bad));
    bad = opts;
    bad.global_sync_every = 0;
    cr_expect_null (kd_controller_new (&bad));
    bad = opts;
    bad.model = (kd_consistency_t) 42;
    cr_expect_null (kd_controller_new (&bad));
    cr_expect_null (kd_controller_new (NULL));

    kd_controller_t *ctl = kd_controller_new (&opts);
    cr_assert (ctl);
    cr_expect_eq (kd_controller_version (ctl), 0);
    cr_expect_eq (kd_controller_active (ctl), 0);
    cr_expect_null (kd_controller_next (ctl));
    kd_controller_destroy (&ctl);
    cr_expect_null (ctl);
    kd_controller_destroy (&ctl);
}


//  --------------------------------------------------------------------------
//  BSP

Test (kd_controller, bsp_barrier_releases_exactly_at_n)
{
    kd_controller_t *ctl = s_new (KD_CONS_BSP, NULL, NULL);
    //  Nobody has arrived yet, so every joiner is admitted at once.
    for (uint32_t rank = 0; rank < 4; rank++) {
        cr_assert_eq (kd_controller_join (ctl, rank, 0), 0);
        cr_assert_eq (s_take (ctl), 1);
        s_expect_release (rank, 0, 0);
        cr_expect_eq (s_log.recs [0].group, 0);
    }
    for (uint64_t clock = 0; clock < 3; clock++) {
        for (uint32_t rank = 0; rank < 3; rank++) {
            s_arrive (ctl, rank, clock, clock, 10);
            cr_expect_eq (s_take (ctl), 0, "released before the barrier");
        }
        s_arrive (ctl, 3, clock, clock, 10);
        cr_assert_eq (s_take (ctl), 5);
        rec_t *commit = &s_log.recs [0];
        cr_assert_eq (commit->type, KD_DEC_COMMIT);
        cr_expect_eq (commit->version, clock + 1);
        cr_assert_eq (commit->n_entries, 4);
        cr_expect_eq (commit->n_drops, 0);
        for (size_t i = 0; i < 4; i++) {
            cr_expect_eq (commit->entries [i].rank, i);
            cr_expect_eq (commit->entries [i].clock, clock);
            cr_expect_float_eq (commit->entries [i].weight, 0.25, 1e-15);
            cr_expect_eq (commit->entries [i].staleness, 0);
        }
        for (uint32_t rank = 0; rank < 4; rank++)
            s_expect_release (rank, clock + 1, clock + 1);
    }
    cr_expect_eq (kd_controller_version (ctl), 3);
    cr_expect_eq (kd_controller_min_clock (ctl), 3);
    kd_controller_destroy (&ctl);
}

Test (kd_controller, bsp_join_mid_phase_waits_for_the_boundary)
{
    kd_controller_t *ctl = s_new (KD_CONS_BSP, NULL, NULL);
    s_join_all (ctl, 3, 0);
    s_arrive (ctl, 0, 0, 0, 1);
    cr_assert_eq (kd_controller_join (ctl, 3, 2), 0);
    cr_expect_eq (s_take (ctl), 0, "joiner admitted mid-phase");
    cr_expect_not (kd_controller_is_active (ctl, 3));
    cr_expect_eq (kd_controller_active (ctl), 3);
    cr_expect_eq (kd_controller_join (ctl, 3, 2), -1, "pending join twice");
    s_arrive (ctl, 1, 0, 0, 3);
    s_arrive (ctl, 2, 0, 0, 4);
    cr_assert_eq (s_take (ctl), 5);
    cr_expect_eq (s_log.recs [0].n_entries, 3, "the joiner is not in the barrier");
    //  The joiner comes with the phase's releases, on the phase clock.
    for (uint32_t rank = 0; rank < 4; rank++)
        s_expect_release (rank, 1, 1);
    cr_expect_eq (s_release_of (3), 4, "joiner released after the phase");
    cr_expect_eq (kd_controller_active (ctl), 4);
    kd_controller_destroy (&ctl);
}

Test (kd_controller, bsp_leave_drops_and_completes_the_barrier)
{
    kd_controller_t *ctl = s_new (KD_CONS_BSP, NULL, NULL);
    s_join_all (ctl, 3, 0);
    //  A waiting worker leaves: its gradient is named in a drop-only commit.
    s_arrive (ctl, 0, 0, 0, 1);
    s_arrive (ctl, 1, 0, 0, 1);
    cr_assert_eq (kd_controller_leave (ctl, 1, 2), 0);
    cr_assert_eq (s_take (ctl), 1);
    rec_t *commit = &s_log.recs [0];
    cr_assert_eq (commit->type, KD_DEC_COMMIT);
    cr_expect_eq (commit->n_entries, 0);
    cr_expect_eq (commit->version, 0, "drop-only commit keeps the version");
    cr_assert_eq (commit->n_drops, 1);
    cr_expect_eq (commit->drops [0].rank, 1);
    cr_expect_eq (commit->drops [0].clock, 0);
    cr_expect_eq (kd_controller_dropped (ctl), 1);
    //  The last missing worker leaves: the barrier is complete at once.
    cr_assert_eq (kd_controller_leave (ctl, 2, 3), 0);
    cr_assert_eq (s_take (ctl), 2);
    commit = &s_log.recs [0];
    cr_assert_eq (commit->n_entries, 1);
    cr_expect_float_eq (commit->entries [0].weight, 1.0, 1e-15);
    cr_expect_eq (commit->version, 1);
    s_expect_release (0, 1, 1);
    //  A worker that left may come back.
    cr_assert_eq (kd_controller_join (ctl, 2, 4), 0);
    cr_assert_eq (s_take (ctl), 1);
    s_expect_release (2, 1, 1);
    //  A joiner mid-phase comes in at the boundary; leaves of computing
    //  workers name nothing.
    s_arrive (ctl, 0, 1, 1, 5);
    cr_assert_eq (kd_controller_join (ctl, 1, 5), 0);
    s_arrive (ctl, 2, 1, 1, 5);
    cr_assert_eq (s_take (ctl), 4);
    cr_assert_eq (kd_controller_leave (ctl, 0, 6), 0);
    cr_expect_eq (s_take (ctl), 0, "leave of a computing worker names nothing");
    s_arrive (ctl, 1, 2, 2, 7);
    s_arrive (ctl, 2, 2, 2, 7);
    cr_assert_eq (s_take (ctl), 3);
    cr_assert_eq (kd_controller_leave (ctl, 1, 8), 0);
    cr_expect_eq (s_take (ctl), 0);
    cr_expect_eq (kd_controller_active (ctl), 1);
    kd_controller_destroy (&ctl);
}


//  --------------------------------------------------------------------------
//  ASP and SSP

Test (kd_controller, asp_commits_and_releases_at_once)
{
    kd_controller_t *ctl = s_new (KD_CONS_ASP, NULL, NULL);
    s_join_all (ctl, 3, 0);
    s_arrive (ctl, 0, 0, 0, 1);
    cr_assert_eq (s_take (ctl), 2);
    rec_t *commit = &s_log.recs [0];
    cr_assert_eq (commit->type, KD_DEC_COMMIT);
    cr_expect_eq (commit->version, 1);
    cr_assert_eq (commit->n_entries, 1);
    cr_expect_float_eq (commit->entries [0].weight, 1.0, 1e-15);
    cr_expect_eq (commit->entries [0].staleness, 0);
    s_expect_release (0, 1, 1);
    s_arrive (ctl, 1, 0, 0, 2);
    cr_assert_eq (s_take (ctl), 2);
    cr_expect_eq (s_log.recs [0].entries [0].staleness, 1);
    s_expect_release (1, 2, 1);
    s_arrive (ctl, 0, 1, 1, 3);
    s_take (ctl);
    cr_expect_eq (s_log.recs [0].entries [0].staleness, 1);
    s_expect_release (0, 3, 2);
    //  Rank 2 is still on clock 0, so a joiner starts at min_clock 0.
    cr_assert_eq (kd_controller_join (ctl, 7, 4), 0);
    cr_assert_eq (s_take (ctl), 1);
    s_expect_release (7, 3, 0);
    kd_controller_destroy (&ctl);
}

//  SSP with s = 1.
static void
s_ssp_one (kd_controller_opts_t *opts)
{
    opts->staleness = 1;
}

Test (kd_controller, ssp_blocks_at_the_bound_and_unblocks)
{
    kd_controller_t *ctl = s_new (KD_CONS_SSP, NULL, s_ssp_one);
    s_join_all (ctl, 2, 0);
    s_arrive (ctl, 0, 0, 0, 1);
    cr_assert_eq (s_take (ctl), 2, "clock 1 <= min_clock 0 + 1: released");
    s_expect_release (0, 1, 1);
    s_arrive (ctl, 0, 1, 1, 2);
    cr_assert_eq (s_take (ctl), 1, "clock 2 > 0 + 1: committed but blocked");
    cr_expect_eq (s_log.recs [0].type, KD_DEC_COMMIT);
    cr_expect_eq (kd_controller_min_clock (ctl), 0);
    //  The slowest catches up: both go.
    s_arrive (ctl, 1, 0, 0, 3);
    cr_assert_eq (s_take (ctl), 3);
    s_expect_release (0, 3, 2);
    s_expect_release (1, 3, 1);
    cr_expect_eq (kd_controller_min_clock (ctl), 1);
    //  Rank 0 blocks again; the slow worker's departure unblocks it.
    s_arrive (ctl, 0, 2, 3, 4);
    cr_assert_eq (s_take (ctl), 1);
    cr_assert_eq (kd_controller_join (ctl, 2, 5), 0);
    cr_assert_eq (s_take (ctl), 1, "SSP admits a joiner at once");
    s_expect_release (2, 4, 1);
    cr_assert_eq (kd_controller_leave (ctl, 1, 6), 0);
    cr_expect_eq (s_take (ctl), 0, "rank 2 still holds min_clock at 1");
    cr_assert_eq (kd_controller_leave (ctl, 2, 7), 0);
    cr_assert_eq (s_take (ctl), 1);
    s_expect_release (0, 4, 3);
    kd_controller_destroy (&ctl);
}


//  Several workers blocked at the SSP bound go at once when the slowest
//  arrives, and their RELEASEs come out in rank order whatever order they
//  blocked in (the controller finds them through a heap by clock).
Test (kd_controller, ssp_unblocks_many_in_rank_order)
{
    kd_controller_t *ctl = s_new (KD_CONS_SSP, NULL, s_ssp_one);
    s_join_all (ctl, 5, 0);
    //  Ranks 4, 2, 3, 1 run two clocks ahead of rank 0 and block there,
    //  in that order; rank 3 blocks one clock earlier than the others.
    uint32_t order [] = { 4, 2, 3, 1 };
    uint64_t v = 0, now = 1;
    for (size_t i = 0; i < 4; i++) {
        uint32_t rank = order [i];
        s_arrive (ctl, rank, 0, 0, now++);
        v++;
        cr_assert_eq (s_take (ctl), 2);
        s_expect_release (rank, v, 1);
        if (rank == 3)
            continue;
        s_arrive (ctl, rank, 1, v, now++);
        v++;
        cr_assert_eq (s_take (ctl), 1, "rank %u blocked at clock 2", rank);
    }
    cr_expect_eq (kd_controller_min_clock (ctl), 0);
    s_arrive (ctl, 0, 0, 0, now++);
    v++;
    cr_assert_eq (s_take (ctl), 5, "commit, then ranks 0, 1, 2, 4");
    cr_expect_eq (s_log.recs [0].type, KD_DEC_COMMIT);
    uint32_t expect [] = { 0, 1, 2, 4 };
    for (size_t i = 0; i < 4; i++) {
        cr_expect_eq (s_log.recs [1 + i].type, KD_DEC_RELEASE);
        cr_expect_eq (s_log.recs [1 + i].rank, expect [i], "release %zu is rank %u",
                      i, s_log.recs [1 + i].rank);
    }
    cr_expect_eq (kd_controller_min_clock (ctl), 1, "rank 0 and 3 compute clock 1");
    kd_controller_destroy (&ctl);
}

//  The incremental min_clock follows joins, leaves and releases in any
//  order: leaving the worker that holds the minimum moves it up at once,
//  and with nobody left the last value is kept.
Test (kd_controller, min_clock_follows_leaves_of_the_slowest)
{
    kd_controller_t *ctl = s_new (KD_CONS_SSP, NULL, NULL);
    s_join_all (ctl, 3, 0);
    uint64_t v = 0, now = 1;
    //  Rank 2 runs to clock 3, rank 1 to clock 2, rank 0 stays at 0.
    for (uint64_t c = 0; c < 3; c++) {
        s_arrive (ctl, 2, c, v, now++);
        v++;
        s_take (ctl);
    }
    for (uint64_t c = 0; c < 2; c++) {
        s_arrive (ctl, 1, c, v, now++);
        v++;
        s_take (ctl);
    }
    cr_expect_eq (kd_controller_min_clock (ctl), 0);
    cr_assert_eq (kd_controller_leave (ctl, 0, now++), 0);
    s_take (ctl);
    cr_expect_eq (kd_controller_min_clock (ctl), 2);
    cr_assert_eq (kd_controller_leave (ctl, 1, now++), 0);
    s_take (ctl);
    cr_expect_eq (kd_controller_min_clock (ctl), 3);
    cr_assert_eq (kd_controller_leave (ctl, 2, now++), 0);
    s_take (ctl);
    cr_expect_eq (kd_controller_min_clock (ctl), 3, "kept when nobody is left");
    cr_assert_eq (kd_controller_join (ctl, 1, now++), 0);
    cr_assert_eq (s_take (ctl), 1);
    s_expect_release (1, v, 3);
    kd_controller_destroy (&ctl);
}


//  --------------------------------------------------------------------------
//  LSP

//  LSP with s = 2.
static void
s_lsp_two (kd_controller_opts_t *opts)
{
    opts->staleness = 2;
}

Test (kd_controller, lsp_releases_at_quota_and_weights_late_gradients)
{
    kd_controller_t *ctl = s_new (KD_CONS_LSP, NULL, s_lsp_two);
    s_join_all (ctl, 4, 0);
    //  K = ceil (0.75 * 4) = 3.
    s_arrive (ctl, 0, 0, 0, 1);
    s_arrive (ctl, 1, 0, 0, 1);
    cr_expect_eq (s_take (ctl), 0);
    s_arrive (ctl, 2, 0, 0, 1);
    cr_assert_eq (s_take (ctl), 4);
    rec_t *commit = s_first (KD_DEC_COMMIT);
    cr_expect_eq (commit->version, 1);
    cr_assert_eq (commit->n_entries, 3);
    for (size_t i = 0; i < 3; i++)
        cr_expect_float_eq (commit->entries [i].weight, 1.0 / 3, 1e-15);
    for (uint32_t rank = 0; rank < 3; rank++)
        s_expect_release (rank, 1, 1);
    //  Rank 3 is late by one version: released at once, not committed yet.
    s_arrive (ctl, 3, 0, 0, 2);
    cr_assert_eq (s_take (ctl), 1);
    s_expect_release (3, 1, 1);
    cr_expect_not (s_log.recs [0].dropped);
    //  It joins the next commit at 1 / (1 + tau) of a fresh gradient.
    s_arrive (ctl, 0, 1, 1, 3);
    s_arrive (ctl, 1, 1, 1, 3);
    s_arrive (ctl, 2, 1, 1, 3);
    cr_assert_eq (s_take (ctl), 4);
    commit = s_first (KD_DEC_COMMIT);
    cr_expect_eq (commit->version, 2);
    cr_assert_eq (commit->n_entries, 4);
    const kd_entry_t *late = s_entry_of (commit, 3, 0);
    const kd_entry_t *fresh = s_entry_of (commit, 0, 1);
    cr_assert (late && fresh);
    cr_expect_eq (late->staleness, 1);
    cr_expect_float_eq (late->weight / fresh->weight, 0.5, 1e-12);
    cr_expect_float_eq (s_weight_sum (commit), 1.0, EPS);
    cr_expect_float_eq (fresh->weight, 1 / 3.5, 1e-12);
    kd_controller_destroy (&ctl);
}

//  LSP with s = 1.
static void
s_lsp_one (kd_controller_opts_t *opts)
{
    opts->staleness = 1;
}

Test (kd_controller, lsp_drops_over_delayed_gradients)
{
    kd_controller_t *ctl = s_new (KD_CONS_LSP, NULL, s_lsp_one);
    s_join_all (ctl, 4, 0);
    for (uint64_t clock = 0; clock < 2; clock++) {
        for (uint32_t rank = 0; rank < 3; rank++)
            s_arrive (ctl, rank, clock, clock, 1);
        s_take (ctl);
    }
    cr_expect_eq (kd_controller_version (ctl), 2);
    //  Rank 3 computed on version 0: tau 2 > s = 1.
    s_arrive (ctl, 3, 0, 0, 2);
    cr_assert_eq (s_take (ctl), 2);
    rec_t *commit = &s_log.recs [0];
    cr_assert_eq (commit->type, KD_DEC_COMMIT, "drop named before the release");
    cr_expect_eq (commit->n_entries, 0);
    cr_expect_eq (commit->version, 2);
    cr_assert_eq (commit->n_drops, 1);
    cr_expect_eq (commit->drops [0].rank, 3);
    cr_expect_eq (commit->drops [0].clock, 0);
    cr_expect_eq (commit->drops [0].staleness, 2);
    cr_expect_eq (commit->drops [0].weight, 0);
    s_expect_release (3, 2, 1);
    cr_expect (s_log.recs [1].dropped);
    cr_expect_eq (kd_controller_dropped (ctl), 1);
    kd_controller_destroy (&ctl);
}

//  LSP with a 100 ms window.
static void
s_lsp_window (kd_controller_opts_t *opts)
{
    opts->window_ms = 100;
}

Test (kd_controller, lsp_window_releases_via_tick_and_arrive)
{
    kd_controller_t *ctl = s_new (KD_CONS_LSP, NULL, s_lsp_window);
    s_join_all (ctl, 4, 0);
    //  K = 3; the window is checked on arrival.
    s_arrive (ctl, 0, 0, 0, 10);
    kd_controller_tick (ctl, 200);
    cr_expect_eq (s_take (ctl), 0, "one arrival never releases by window");
    s_arrive (ctl, 1, 0, 0, 210);
    cr_assert_eq (s_take (ctl), 3);
    rec_t *commit = s_first (KD_DEC_COMMIT);
    cr_assert_eq (commit->n_entries, 2);
    cr_expect_float_eq (commit->entries [0].weight, 0.5, 1e-15);
    s_expect_release (0, 1, 1);
    s_expect_release (1, 1, 1);
    //  And on tick.
    s_arrive (ctl, 0, 1, 1, 300);
    s_arrive (ctl, 1, 1, 1, 350);
    cr_expect_eq (s_take (ctl), 0);
    kd_controller_tick (ctl, 399);
    cr_expect_eq (s_take (ctl), 0, "window not over yet");
    kd_controller_tick (ctl, 400);
    cr_assert_eq (s_take (ctl), 3);
    cr_expect_eq (s_first (KD_DEC_COMMIT)->version, 2);
    kd_controller_destroy (&ctl);
}

//  LSP with K = N.
static void
s_lsp_all (kd_controller_opts_t *opts)
{
    opts->quota_ratio = 1.0;
}

Test (kd_controller, lsp_join_and_leave_mid_phase)
{
    kd_controller_t *ctl = s_new (KD_CONS_LSP, NULL, NULL);
    s_join_all (ctl, 4, 0);
    s_arrive (ctl, 0, 0, 0, 1);
    s_arrive (ctl, 1, 0, 0, 1);
    cr_assert_eq (kd_controller_join (ctl, 4, 2), 0);
    cr_expect_eq (s_take (ctl), 0);
    s_arrive (ctl, 2, 0, 0, 3);
    cr_assert_eq (s_take (ctl), 5);
    cr_expect_eq (s_first (KD_DEC_COMMIT)->n_entries, 3);
    //  Rank 3 still computes clock 0, so the joiner starts at min_clock 0.
    s_expect_release (4, 1, 0);
    cr_expect_eq (s_release_of (4), 4);
    kd_controller_destroy (&ctl);

    //  With K = N a departure completes the quota.
    ctl = s_new (KD_CONS_LSP, NULL, s_lsp_all);
    s_join_all (ctl, 4, 0);
    for (uint32_t rank = 0; rank < 3; rank++)
        s_arrive (ctl, rank, 0, 0, 1);
    cr_expect_eq (s_take (ctl), 0);
    cr_assert_eq (kd_controller_leave (ctl, 3, 2), 0);
    cr_assert_eq (s_take (ctl), 4);
    cr_expect_eq (s_first (KD_DEC_COMMIT)->n_entries, 3);
    kd_controller_destroy (&ctl);

    //  A departing worker's queued late gradient is dropped.
    ctl = s_new (KD_CONS_LSP, NULL, s_lsp_two);
    s_join_all (ctl, 4, 0);
    for (uint32_t rank = 0; rank < 3; rank++)
        s_arrive (ctl, rank, 0, 0, 1);
    s_take (ctl);
    s_arrive (ctl, 3, 0, 0, 2);
    cr_assert_eq (s_take (ctl), 1);
    cr_assert_eq (kd_controller_leave (ctl, 3, 3), 0);
    cr_assert_eq (s_take (ctl), 1);
    rec_t *commit = &s_log.recs [0];
    cr_expect_eq (commit->n_entries, 0);
    cr_assert_eq (commit->n_drops, 1);
    cr_expect_eq (commit->drops [0].rank, 3);
    cr_expect_eq (commit->drops [0].staleness, 1);
    cr_expect_eq (kd_controller_dropped (ctl), 1);
    kd_controller_destroy (&ctl);

    //  A departure that completes the quota names its drops in that commit.
    ctl = s_new (KD_CONS_LSP, NULL, s_lsp_two);
    s_join_all (ctl, 5, 0);
    for (uint32_t rank = 0; rank < 4; rank++)
        s_arrive (ctl, rank, 0, 0, 1);
    s_take (ctl);
    s_arrive (ctl, 4, 0, 0, 2);
    cr_assert_eq (s_take (ctl), 1);
    for (uint32_t rank = 0; rank < 3; rank++)
        s_arrive (ctl, rank, 1, 1, 3);
    cr_expect_eq (s_take (ctl), 0, "K = 4 of 5");
    cr_assert_eq (kd_controller_leave (ctl, 4, 4), 0);
    cr_assert_eq (s_take (ctl), 4, "K = 3 of 4: one commit, three releases");
    commit = &s_log.recs [0];
    cr_expect_eq (commit->n_entries, 3);
    cr_assert_eq (commit->n_drops, 1);
    cr_expect_eq (commit->drops [0].rank, 4);
    kd_controller_destroy (&ctl);
}

//  Play a fixed script of joins, arrivals and a leave, logging decisions.
static void
s_script (kd_controller_t *ctl, log_t *log, bool skip_groups)
{
    uint64_t clock [6] = { 0 };
    uint64_t version [6] = { 0 };
    //  Four workers run three BSP rounds with a join and a leave inside.
    for (uint32_t rank = 0; rank < 4; rank++)
        cr_assert_eq (kd_controller_join (ctl, rank, 0), 0);
    log_drain (log, ctl, skip_groups);
    for (int round = 0; round < 3; round++) {
        for (uint32_t rank = 0; rank < 4; rank++) {
            if (!kd_controller_is_active (ctl, rank))
                continue;
            cr_assert_eq (kd_controller_arrive (ctl, rank, clock [rank],
                                                version [rank], 32, round), 0);
            if (round == 1 && rank == 1) {
                cr_assert_eq (kd_controller_join (ctl, 5, round), 0);
                cr_assert_eq (kd_controller_leave (ctl, 2, round), 0);
            }
            size_t before = log->n;
            log_drain (log, ctl, skip_groups);
            for (size_t i = before; i < log->n; i++)
                if (log->recs [i].type == KD_DEC_RELEASE) {
                    clock [log->recs [i].rank] = log->recs [i].clock;
                    version [log->recs [i].rank] = log->recs [i].version;
                }
        }
    }
}

Test (kd_controller, lsp_degenerate_settings_scripted)
{
    //  K = N, s = 0 gives BSP's decisions exactly.
    log_t bsp = { 0 }, lsp = { 0 };
    kd_controller_t *a = s_new (KD_CONS_BSP, NULL, NULL);
    kd_controller_opts_t opts;
    kd_controller_opts_defaults (&opts, KD_CONS_LSP);
    opts.quota_ratio = 1.0;
    opts.staleness = 0;
    kd_controller_t *b = kd_controller_new (&opts);
    s_script (a, &bsp, false);
    s_script (b, &lsp, false);
    cr_expect_gt (bsp.n, 10);
    s_expect_same_logs (&bsp, &lsp, "bsp vs lsp(K=N,s=0)");
    kd_controller_destroy (&a);
    kd_controller_destroy (&b);
    log_free (&bsp);
    log_free (&lsp);

    //  K = N - 1, s = 0: backup workers, the straggler's gradient is dropped.
    opts.quota_ratio = 0.75;
    kd_controller_t *ctl = kd_controller_new (&opts);
    s_join_all (ctl, 4, 0);
    for (uint32_t rank = 0; rank < 3; rank++)
        s_arrive (ctl, rank, 0, 0, 1);
    s_take (ctl);
    for (size_t i = 0; i < s_first (KD_DEC_COMMIT)->n_entries; i++)
        cr_expect_eq (s_first (KD_DEC_COMMIT)->entries [i].staleness, 0);
    s_arrive (ctl, 3, 0, 0, 2);
    cr_assert_eq (s_take (ctl), 2);
    cr_expect_eq (s_first (KD_DEC_COMMIT)->n_drops, 1);
    cr_expect (s_log.recs [1].dropped);
    kd_controller_destroy (&ctl);

    //  K = 1: every arrival is released at once, like ASP, with tau <= s.
    opts.quota = 1;
    opts.staleness = 3;
    ctl = kd_controller_new (&opts);
    s_join_all (ctl, 3, 0);
    s_arrive (ctl, 0, 0, 0, 1);
    cr_assert_eq (s_take (ctl), 2);
    s_expect_release (0, 1, 1);
    s_arrive (ctl, 1, 0, 0, 1);
    cr_assert_eq (s_take (ctl), 1, "late: released, applied with the next");
    s_expect_release (1, 1, 1);
    s_arrive (ctl, 0, 1, 1, 1);
    cr_assert_eq (s_take (ctl), 2);
    cr_expect_eq (s_first (KD_DEC_COMMIT)->n_entries, 2);
    cr_expect_eq (s_entry_of (s_first (KD_DEC_COMMIT), 1, 0)->staleness, 1);
    kd_controller_destroy (&ctl);
}


//  --------------------------------------------------------------------------
//  ALSP

//  ALSP with staleness and sync settings that keep the script simple.
static void
s_alsp_loose (kd_controller_opts_t *opts)
{
    opts->staleness = 100;
    opts->global_sync_every = 100;
}

//  Eight workers, 0-3 at 10 ms and 4-7 at 30 ms.  The first grouping needs
//  no dwell: it is scheduled at t = 100 (long before the 10 s dwell), as
//  soon as everyone has reported and rank 0 has been outside the unknown
//  band 3 times in a row, and it runs when that sync completes at t = 200.
//  Returns with everyone released into two groups on version 1.
static void
s_alsp_two_groups (kd_controller_t *ctl)
{
    for (uint32_t rank = 0; rank < 8; rank++)
        cr_assert_eq (kd_controller_join (ctl, rank, 0), 0);
    s_take (ctl);
    //  Each admission changes the table; the last shows the formation.
    cr_assert_eq (s_count (KD_DEC_GROUPS), 8);
    rec_t *groups = s_last (KD_DEC_GROUPS);
    cr_expect_eq (groups->group_count, 1);
    for (uint32_t rank = 0; rank < 8; rank++)
        cr_expect_eq (groups->groups [rank], 0);
    cr_expect_eq (groups->groups [8], UINT32_MAX);
    //  Two samples each: everyone is outside, but not 3 in a row yet.
    for (int i = 0; i < 2; i++)
        for (uint32_t rank = 0; rank < 8; rank++)
            cr_assert_eq (kd_controller_telemetry (ctl, rank,
                                                   rank < 4 ? 10 : 30, 100), 0);
    kd_controller_tick (ctl, 100);
    cr_expect_not (kd_controller_syncing (ctl), "2 in a row is not enough");
    //  Rank 0's third sample schedules the first grouping at once.
    cr_assert_eq (kd_controller_telemetry (ctl, 0, 10, 100), 0);
    cr_expect (kd_controller_syncing (ctl), "first grouping waits for no dwell");
    for (uint32_t rank = 1; rank < 8; rank++)
        cr_assert_eq (kd_controller_telemetry (ctl, rank,
                                               rank < 4 ? 10 : 30, 100), 0);
    cr_expect (kd_controller_syncing (ctl), "regroup flushed by a global sync");
    cr_expect_eq (s_take (ctl), 0);
    cr_expect_eq (kd_controller_regroups (ctl), 0, "not before the sync ends");
    for (uint32_t rank = 0; rank < 7; rank++)
        s_arrive (ctl, rank, 0, 0, 200);
    cr_expect_eq (s_take (ctl), 0, "the sync waits for everyone");
    s_arrive (ctl, 7, 0, 0, 200);
    s_take (ctl);
    rec_t *commit = &s_log.recs [0];
    cr_assert_eq (commit->type, KD_DEC_COMMIT);
    cr_assert_eq (commit->n_entries, 8);
    for (size_t i = 0; i < 8; i++)
        cr_expect_float_eq (commit->entries [i].weight, 0.125, 1e-15);
    cr_assert_eq (s_log.recs [1].type, KD_DEC_GROUPS);
    groups = &s_log.recs [1];
    cr_expect_eq (groups->group_count, 2);
    for (uint32_t rank = 0; rank < 8; rank++) {
        cr_expect_eq (groups->groups [rank], rank < 4 ? 0 : 1);
        cr_expect_eq (kd_controller_group_of (ctl, rank), rank < 4 ? 0 : 1);
        int i = s_release_of (rank);
        cr_assert (i >= 0);
        cr_expect_eq (s_log.recs [i].group, rank < 4 ? 0 : 1);
        s_expect_release (rank, 1, 1);
    }
    cr_expect_eq (kd_controller_regroups (ctl), 1);
    cr_expect_not (kd_controller_syncing (ctl));
}

Test (kd_controller, alsp_groups_from_telemetry)
{
    kd_controller_t *ctl = s_new (KD_CONS_ALSP, NULL, s_alsp_loose);
    s_alsp_two_groups (ctl);
    cr_expect_eq (kd_controller_group_of (ctl, 9), UINT32_MAX);
    kd_controller_destroy (&ctl);
}

Test (kd_controller, alsp_group_commit_weights)
{
    kd_controller_t *ctl = s_new (KD_CONS_ALSP, NULL, s_alsp_loose);
    s_alsp_two_groups (ctl);
    //  Fast group, K_g = ceil (0.75 * 4) = 3: weights (4 / 8) / 3.
    s_arrive (ctl, 0, 1, 1, 210);
    s_arrive (ctl, 1, 1, 1, 210);
    s_arrive (ctl, 4, 1, 1, 210);
    cr_expect_eq (s_take (ctl), 0);
    s_arrive (ctl, 2, 1, 1, 210);
    cr_assert_eq (s_take (ctl), 4);
    rec_t *commit = s_first (KD_DEC_COMMIT);
    cr_assert_eq (commit->n_entries, 3);
    for (size_t i = 0; i < 3; i++) {
        cr_expect_lt (commit->entries [i].rank, 4);
        cr_expect_float_eq (commit->entries [i].weight, 1.0 / 6, 1e-15);
    }
    cr_expect_float_eq (s_weight_sum (commit), 0.5, EPS);
    for (uint32_t rank = 0; rank < 3; rank++) {
        s_expect_release (rank, 2, 2);
        cr_expect_eq (s_log.recs [s_release_of (rank)].group, 0);
    }
    //  The slow group's phase is still in version 1, so its gradients carry
    //  the fast group's commit as staleness.
    s_arrive (ctl, 5, 1, 1, 220);
    s_arrive (ctl, 6, 1, 1, 220);
    cr_assert_eq (s_take (ctl), 4);
    commit = s_first (KD_DEC_COMMIT);
    cr_assert_eq (commit->n_entries, 3);
    cr_expect_float_eq (s_weight_sum (commit), 0.5, EPS);
    for (size_t i = 0; i < 3; i++)
        cr_expect_eq (commit->entries [i].staleness, 1, "fast group committed once");
    s_expect_release (4, 3, 2);
    cr_expect_eq (s_log.recs [s_release_of (4)].group, 1);
    kd_controller_destroy (&ctl);
}

//  ALSP with a global sync every second phase of the slowest group.
static void
s_alsp_sync_every_two (kd_controller_opts_t *opts)
{
    opts->staleness = 100;
    opts->global_sync_every = 2;
}

Test (kd_controller, alsp_global_sync_every_slowest_phases)
{
    kd_controller_t *ctl = s_new (KD_CONS_ALSP, NULL, s_alsp_sync_every_two);
    s_alsp_two_groups (ctl);
    //  Slow group phase 1 is a group commit.
    for (uint32_t rank = 4; rank < 7; rank++)
        s_arrive (ctl, rank, 1, 1, 300);
    cr_assert_eq (s_take (ctl), 4);
    cr_expect_float_eq (s_weight_sum (s_first (KD_DEC_COMMIT)), 0.5, EPS);
    //  Phase 2 turns into a global sync: nobody goes until all arrive.
    for (uint32_t rank = 4; rank < 7; rank++)
        s_arrive (ctl, rank, 2, 2, 400);
    cr_expect_eq (s_take (ctl), 0);
    cr_expect (kd_controller_syncing (ctl));
    s_arrive (ctl, 7, 1, 1, 400);
    cr_expect_eq (s_take (ctl), 0, "rank 7 counts toward the barrier");
    for (uint32_t rank = 0; rank < 3; rank++)
        s_arrive (ctl, rank, 1, 1, 400);
    cr_expect_eq (s_take (ctl), 0, "fast group quota is suspended");
    s_arrive (ctl, 3, 1, 1, 400);
    cr_assert_eq (s_take (ctl), 9);
    rec_t *commit = s_first (KD_DEC_COMMIT);
    cr_expect_eq (commit->version, 3);
    cr_assert_eq (commit->n_entries, 8);
    cr_expect_float_eq (s_weight_sum (commit), 1.0, EPS);
    for (uint32_t rank = 0; rank < 8; rank++) {
        int i = s_release_of (rank);
        cr_assert (i >= 0);
        cr_expect_eq (s_log.recs [i].version, 3, "all released on one version");
    }
    cr_expect_not (kd_controller_syncing (ctl));
    kd_controller_destroy (&ctl);
}

//  ALSP with s = 1.
static void
s_alsp_tight (kd_controller_opts_t *opts)
{
    opts->staleness = 1;
    opts->global_sync_every = 100;
}

Test (kd_controller, alsp_sync_bounds_staleness_between_groups)
{
    kd_controller_t *ctl = s_new (KD_CONS_ALSP, NULL, s_alsp_tight);
    s_alsp_two_groups (ctl);
    //  The fast group commits once: the slow group is one version behind.
    for (uint32_t rank = 0; rank < 3; rank++)
        s_arrive (ctl, rank, 1, 1, 210);
    cr_assert_eq (s_take (ctl), 4);
    cr_expect_eq (kd_controller_version (ctl), 2);
    //  A second fast commit would leave it two behind (> s): global sync.
    for (uint32_t rank = 0; rank < 3; rank++)
        s_arrive (ctl, rank, 2, 2, 220);
    cr_expect_eq (s_take (ctl), 0);
    cr_expect (kd_controller_syncing (ctl));
    s_arrive (ctl, 3, 1, 1, 230);
    for (uint32_t rank = 4; rank < 8; rank++)
        s_arrive (ctl, rank, 1, 1, 240);
    s_take (ctl);
    rec_t *commit = s_first (KD_DEC_COMMIT);
    cr_assert_eq (commit->n_entries, 8);
    for (size_t i = 0; i < commit->n_entries; i++)
        cr_expect_leq (commit->entries [i].staleness, 1);
    cr_expect_eq (s_count (KD_DEC_RELEASE), 8);
    kd_controller_destroy (&ctl);
}

Test (kd_controller, alsp_hysteresis_ignores_a_single_outlier)
{
    kd_controller_t *ctl = s_new (KD_CONS_ALSP, NULL, s_alsp_loose);
    s_alsp_two_groups (ctl);
    //  Groups formed at t = 200; long after the dwell since then, one spike
    //  of rank 0 does not regroup.
    cr_assert_eq (kd_controller_telemetry (ctl, 0, 100, 30000), 0);
    for (int i = 0; i < 5; i++)
        cr_assert_eq (kd_controller_telemetry (ctl, 0, 10, 30001 + i), 0);
    kd_controller_tick (ctl, 40000);
    cr_expect_not (kd_controller_syncing (ctl));
    cr_expect_eq (kd_controller_regroups (ctl), 1);
    //  Two spikes in a row do not either.
    cr_assert_eq (kd_controller_telemetry (ctl, 0, 100, 40001), 0);
    cr_assert_eq (kd_controller_telemetry (ctl, 0, 100, 40002), 0);
    cr_assert_eq (kd_controller_telemetry (ctl, 0, 10, 40003), 0);
    kd_controller_tick (ctl, 50000);
    cr_expect_not (kd_controller_syncing (ctl));
    cr_expect_eq (s_take (ctl), 0);
    cr_expect_eq (kd_controller_regroups (ctl), 1);
    //  Control: three in a row do schedule a regroup.
    for (int i = 0; i < 2; i++)
        cr_assert_eq (kd_controller_telemetry (ctl, 0, 100, 50001 + i), 0);
    cr_expect_not (kd_controller_syncing (ctl));
    cr_assert_eq (kd_controller_telemetry (ctl, 0, 100, 50003), 0);
    cr_expect (kd_controller_syncing (ctl), "3 in a row regroup");
    kd_controller_destroy (&ctl);
}

Test (kd_controller, alsp_regroups_after_three_in_a_row_and_dwell)
{
    kd_controller_t *ctl = s_new (KD_CONS_ALSP, NULL, s_alsp_loose);
    s_alsp_two_groups (ctl);
    //  Rank 0 slows down right after the first grouping at t = 200.
    for (int i = 0; i < 3; i++)
        cr_assert_eq (kd_controller_telemetry (ctl, 0, 30, 201 + i), 0);
    cr_expect_not (kd_controller_syncing (ctl), "dwell holds the regroup");
    //  The dwell runs from the first grouping, not from the start (t = 0).
    kd_controller_tick (ctl, 10000);
    cr_expect_not (kd_controller_syncing (ctl), "dwell counts from t = 200");
    kd_controller_tick (ctl, 10199);
    cr_expect_not (kd_controller_syncing (ctl));
    cr_expect_eq (kd_controller_regroups (ctl), 1);
    kd_controller_tick (ctl, 10200);
    cr_expect (kd_controller_syncing (ctl), "dwell since the first grouping passed");
    for (uint32_t rank = 0; rank < 8; rank++)
        s_arrive (ctl, rank, 1, 1, 10300);
    s_take (ctl);
    rec_t *groups = s_first (KD_DEC_GROUPS);
    cr_expect_eq (groups->group_count, 2);
    cr_expect_eq (groups->groups [0], 1, "rank 0 joins the slow group");
    for (uint32_t rank = 1; rank < 4; rank++)
        cr_expect_eq (groups->groups [rank], 0);
    for (uint32_t rank = 4; rank < 8; rank++)
        cr_expect_eq (groups->groups [rank], 1);
    cr_expect_eq (kd_controller_regroups (ctl), 2);
    kd_controller_destroy (&ctl);
}

Test (kd_controller, alsp_first_grouping_skips_the_dwell)
{
    //  Default 10 s dwell; everything below happens before t = 100.
    kd_controller_opts_t opts;
    kd_controller_t *ctl = s_new (KD_CONS_ALSP, &opts, s_alsp_loose);
    cr_assert_eq (opts.regroup_dwell_ms, 10000);
    s_join_all (ctl, 4, 0);
    //  Rank 0 is outside the unknown band 3 times in a row, but ranks 1-3
    //  have not reported: no grouping around unknown speeds.
    for (int i = 0; i < 3; i++)
        cr_assert_eq (kd_controller_telemetry (ctl, 0, 10, 10 + i), 0);
    cr_expect_not (kd_controller_syncing (ctl), "rank 1-3 unknown");
    cr_assert_eq (kd_controller_telemetry (ctl, 1, 10, 20), 0);
    cr_assert_eq (kd_controller_telemetry (ctl, 2, 30, 20), 0);
    kd_controller_tick (ctl, 30);
    cr_expect_not (kd_controller_syncing (ctl), "rank 3 unknown");
    //  The last member's first report schedules it, long before the dwell.
    cr_assert_eq (kd_controller_telemetry (ctl, 3, 30, 40), 0);
    cr_expect (kd_controller_syncing (ctl), "first grouping at t = 40");
    cr_expect_eq (s_take (ctl), 0);
    for (uint32_t rank = 0; rank < 4; rank++)
        s_arrive (ctl, rank, 0, 0, 50);
    s_take (ctl);
    cr_assert_eq (s_log.recs [0].type, KD_DEC_COMMIT);
    cr_expect_eq (s_log.recs [0].n_entries, 4);
    rec_t *groups = s_first (KD_DEC_GROUPS);
    cr_expect_eq (groups->group_count, 2);
    for (uint32_t rank = 0; rank < 4; rank++) {
        cr_expect_eq (groups->groups [rank], rank < 2 ? 0 : 1);
        s_expect_release (rank, 1, 1);
    }
    cr_expect_eq (kd_controller_regroups (ctl), 1);
    cr_expect_not (kd_controller_syncing (ctl));
    //  The next regroup waits for the dwell since t = 50.
    for (int i = 0; i < 3; i++)
        cr_assert_eq (kd_controller_telemetry (ctl, 0, 30, 60 + i), 0);
    kd_controller_tick (ctl, 10049);
    cr_expect_not (kd_controller_syncing (ctl), "dwell since the first grouping");
    kd_controller_tick (ctl, 10050);
    cr_expect (kd_controller_syncing (ctl));
    kd_controller_destroy (&ctl);
}

//  Group n workers with the given speeds: the first grouping is scheduled
//  by the telemetry at t = 1, with no dwell, and runs at t = 2.
static void
s_alsp_group_speeds (kd_controller_t *ctl, const double *speeds, uint32_t n)
{
    for (uint32_t rank = 0; rank < n; rank++)
        cr_assert_eq (kd_controller_join (ctl, rank, 0), 0);
    for (int i = 0; i < 3; i++)
        for (uint32_t rank = 0; rank < n; rank++)
            cr_assert_eq (kd_controller_telemetry (ctl, rank, speeds [rank], 1), 0);
    cr_assert (kd_controller_syncing (ctl));
    for (uint32_t rank = 0; rank < n; rank++)
        s_arrive (ctl, rank, 0, 0, 2);
    s_take (ctl);
}

//  ALSP with a 1 s dwell and at most two groups.
static void
s_alsp_two_max (kd_controller_opts_t *opts)
{
    opts->regroup_dwell_ms = 1000;
    opts->max_groups = 2;
}

Test (kd_controller, alsp_min_group_and_max_groups)
{
    //  A lone slow worker joins its nearest group.
    double lone [] = { 10, 10, 30, 30, 90 };
    kd_controller_t *ctl = s_new (KD_CONS_ALSP, NULL, s_alsp_two_max);
    s_alsp_group_speeds (ctl, lone, 5);
    rec_t *groups = s_last (KD_DEC_GROUPS);
    cr_expect_eq (groups->group_count, 2);
    uint32_t expect_lone [] = { 0, 0, 1, 1, 1 };
    for (uint32_t rank = 0; rank < 5; rank++)
        cr_expect_eq (groups->groups [rank], expect_lone [rank]);
    kd_controller_destroy (&ctl);

    //  Three bands, at most two groups: the closest pair merges.
    double bands [] = { 10, 10, 20, 20, 60, 60 };
    ctl = s_new (KD_CONS_ALSP, NULL, s_alsp_two_max);
    s_alsp_group_speeds (ctl, bands, 6);
    groups = s_last (KD_DEC_GROUPS);
    cr_expect_eq (groups->group_count, 2);
    uint32_t expect_bands [] = { 0, 0, 0, 0, 1, 1 };
    for (uint32_t rank = 0; rank < 6; rank++)
        cr_expect_eq (groups->groups [rank], expect_bands [rank]);
    kd_controller_destroy (&ctl);
}

Test (kd_controller, alsp_join_and_leave)
{
    kd_controller_t *ctl = s_new (KD_CONS_ALSP, NULL, s_alsp_loose);
    s_alsp_two_groups (ctl);
    //  A joiner goes to the slowest group, at that group's boundary.
    s_arrive (ctl, 4, 1, 1, 300);
    cr_assert_eq (kd_controller_join (ctl, 8, 300), 0);
    cr_expect_eq (s_take (ctl), 0);
    s_arrive (ctl, 5, 1, 1, 300);
    s_arrive (ctl, 6, 1, 1, 300);
    s_take (ctl);
    s_expect_release (8, 2, 1);
    cr_expect_eq (s_log.recs [s_release_of (8)].group, 1);
    cr_expect_eq (kd_controller_group_of (ctl, 8), 1);
    rec_t *groups = s_first (KD_DEC_GROUPS);
    cr_expect_eq (groups->groups [8], 1);
    //  Departures complete a group's quota: K_g = ceil (0.75 * 2) = 2 once
    //  ranks 2 and 3 have left the fast group.
    s_arrive (ctl, 0, 1, 1, 400);
    s_arrive (ctl, 1, 1, 1, 400);
    cr_expect_eq (s_take (ctl), 0);
    cr_assert_eq (kd_controller_leave (ctl, 2, 400), 0);
    cr_assert_eq (s_take (ctl), 1, "K_g = 3 of 3: only the new table");
    cr_expect_eq (s_first (KD_DEC_GROUPS)->groups [2], UINT32_MAX);
    cr_assert_eq (kd_controller_leave (ctl, 3, 400), 0);
    cr_assert_eq (s_take (ctl), 4, "commit, two releases, table");
    cr_expect_eq (s_first (KD_DEC_COMMIT)->n_entries, 2);
    cr_expect_float_eq (s_weight_sum (s_first (KD_DEC_COMMIT)), 2.0 / 7, EPS);
    kd_controller_destroy (&ctl);

    //  A departure completes a global sync.
    ctl = s_new (KD_CONS_ALSP, NULL, s_alsp_loose);
    s_alsp_two_groups (ctl);
    //  Once the dwell since the first grouping (t = 200) has passed.
    for (int i = 0; i < 3; i++)
        cr_assert_eq (kd_controller_telemetry (ctl, 0, 30, 10201 + i), 0);
    cr_assert (kd_controller_syncing (ctl));
    for (uint32_t rank = 0; rank < 7; rank++)
        s_arrive (ctl, rank, 1, 1, 10300);
    cr_expect_eq (s_take (ctl), 0);
    cr_assert_eq (kd_controller_leave (ctl, 7, 10400), 0);
    s_take (ctl);
    cr_expect_eq (s_first (KD_DEC_COMMIT)->n_entries, 7);
    cr_expect_eq (s_count (KD_DEC_RELEASE), 7);
    cr_expect_not (kd_controller_syncing (ctl));
    kd_controller_destroy (&ctl);
}


//  --------------------------------------------------------------------------
//  Invalid events

//  State an invalid event must leave alone.
typedef struct {
    uint64_t version;           //  V
    size_t active;              //  N
    uint64_t min_clock;         //  min_clock
    uint64_t dropped;           //  dropped
    uint64_t regroups;          //  regroups
    bool syncing;               //  sync in progress
} snapshot_t;

//  Take a snapshot of the observable state.
static snapshot_t
s_snapshot (kd_controller_t *ctl)
{
    return (snapshot_t) {
        kd_controller_version (ctl), kd_controller_active (ctl),
        kd_controller_min_clock (ctl), kd_controller_dropped (ctl),
        kd_controller_regroups (ctl), kd_controller_syncing (ctl)
    };
}

//  Expect the event's result to be -1 with no decisions and no change.
static void
s_expect_refused (kd_controller_t *ctl, const snapshot_t *before, int rc,
                  const char *what)
{
    cr_expect_eq (rc, -1, "%s accepted", what);
    cr_expect_null (kd_controller_next (ctl), "%s emitted a decision", what);
    snapshot_t after = s_snapshot (ctl);
    cr_expect (before->version == after.version && before->active == after.active
            && before->min_clock == after.min_clock
            && before->dropped == after.dropped
            && before->regroups == after.regroups
            && before->syncing == after.syncing, "%s changed state", what);
}

Test (kd_controller, invalid_events_change_nothing)
{
    for (int model = KD_CONS_BSP; model <= KD_CONS_ALSP; model++) {
        kd_controller_t *ctl = s_new ((kd_consistency_t) model, NULL, NULL);
        s_join_all (ctl, 3, 0);
        //  Rank 0 waits at a barrier (or is committed), rank 1 computes.
        s_arrive (ctl, 0, 0, 0, 1);
        s_take (ctl);
        bool waiting = s_release_of (0) < 0;
        s_arrive (ctl, 1, 0, 0, 1);
        s_take (ctl);
        if (model == KD_CONS_BSP || model == KD_CONS_LSP || model == KD_CONS_ALSP)
            cr_assert_eq (kd_controller_join (ctl, 4, 2), 0, "pending joiner");
        s_take (ctl);
        snapshot_t before = s_snapshot (ctl);
        uint64_t version = kd_controller_version (ctl);
        s_expect_refused (ctl, &before,
            kd_controller_arrive (ctl, 9, 0, 0, 32, 3), "arrive inactive");
        s_expect_refused (ctl, &before,
            kd_controller_arrive (ctl, 2000, 0, 0, 32, 3), "arrive rank range");
        s_expect_refused (ctl, &before,
            kd_controller_arrive (ctl, 2, 1, 0, 32, 3), "arrive wrong clock");
        s_expect_refused (ctl, &before,
            kd_controller_arrive (ctl, 2, 0, version + 1, 32, 3), "arrive future base");
        if (waiting)
            s_expect_refused (ctl, &before,
                kd_controller_arrive (ctl, 0, 0, 0, 32, 3), "duplicate arrival");
        if (kd_controller_syncing (ctl) == false && model != KD_CONS_ASP
        &&  model != KD_CONS_SSP)
            s_expect_refused (ctl, &before,
                kd_controller_arrive (ctl, 4, 0, 0, 32, 3), "arrive pending");
        s_expect_refused (ctl, &before,
            kd_controller_join (ctl, 2, 3), "join active");
        if (model == KD_CONS_BSP || model == KD_CONS_LSP || model == KD_CONS_ALSP)
            s_expect_refused (ctl, &before,
                kd_controller_join (ctl, 4, 3), "join pending");
        s_expect_refused (ctl, &before,
            kd_controller_join (ctl, 1024, 3), "join rank range");
        s_expect_refused (ctl, &before,
            kd_controller_leave (ctl, 9, 3), "leave inactive");
        s_expect_refused (ctl, &before,
            kd_controller_leave (ctl, UINT32_MAX, 3), "leave rank range");
        s_expect_refused (ctl, &before,
            kd_controller_telemetry (ctl, 9, 10, 3), "telemetry inactive");
        s_expect_refused (ctl, &before,
            kd_controller_telemetry (ctl, 2, -1, 3), "telemetry negative");
        s_expect_refused (ctl, &before,
            kd_controller_telemetry (ctl, 2, NAN, 3), "telemetry nan");
        s_expect_refused (ctl, &before,
            kd_controller_telemetry (ctl, 2, INFINITY, 3), "telemetry inf");
        kd_controller_destroy (&ctl);
    }
}

Test (kd_controller, arrive_base_must_match_the_release)
{
    //  Released on version 2, a worker cannot claim a base below it.
    kd_controller_t *ctl = s_new (KD_CONS_ASP, NULL, NULL);
    s_join_all (ctl, 2, 0);
    s_arrive (ctl, 0, 0, 0, 1);
    s_arrive (ctl, 0, 1, 1, 1);
    s_take (ctl);
    snapshot_t before = s_snapshot (ctl);
    s_expect_refused (ctl, &before,
        kd_controller_arrive (ctl, 0, 2, 1, 32, 2), "base below release");
    //  A newer base than the release is fine (the shard served a newer model).
    s_arrive (ctl, 1, 0, 2, 3);
    s_take (ctl);
    cr_expect_eq (s_first (KD_DEC_COMMIT)->entries [0].staleness, 0);
    kd_controller_destroy (&ctl);
}


//  --------------------------------------------------------------------------
//  Random driver

//  Simulated worker states.
typedef enum { W_INACTIVE, W_PENDING, W_COMPUTING, W_WAITING } wstate_t;

//  A staged gradient the simulation expects to see named once.
typedef struct {
    bool used;                  //  slot holds a gradient
    uint64_t clock;             //  its clock
    uint64_t base;              //  its base
} staged_t;

//  The simulated cluster around one controller.
typedef struct {
    kd_controller_t *ctl;       //  controller under test
    kd_controller_t *twin;      //  controller whose stream must match, or NULL
    bool twin_skip_groups;      //  compare ignoring GROUPS
    kd_controller_opts_t opts;  //  its options
    uint32_t n_ranks;           //  ranks in play
    wstate_t *state;            //  per rank
    uint64_t *clock;            //  clock computing / arrived for
    uint64_t *version;          //  version of its last release
    int *speed;                 //  1 fast, 3 slow
    staged_t (*staged) [STAGED_SLOTS]; //  per rank staged gradients
    uint64_t *t_first;          //  per group: first arrival of its phase
    uint32_t *group;            //  per rank group as last published
    uint32_t *g_size;           //  scratch: per group size
    uint32_t *g_waiting;        //  scratch: per group waiting
    uint32_t *rel_active;       //  SSP: active workers at its release
    uint64_t *rel_admissions;   //  SSP: admissions before its release
    uint64_t admissions;        //  pending workers released so far
    uint64_t v;                 //  version as seen in commits
    uint64_t dropped;           //  drops seen
    uint64_t now;               //  simulated time
    uint64_t seed;              //  rng state
    bool telemetry;             //  send telemetry events
    bool churn;                 //  send joins and leaves
    bool was_syncing;           //  syncing after the previous event
    uint32_t arrived_rank;      //  last arrival (for immediate checks)
    bool arrived_late;          //  it was on a base below V
    uint64_t arrived_tau;       //  its staleness at arrival
    log_t log;                  //  decisions of the current event
    log_t twin_log;             //  twin's decisions of the current event
    //  Statistics, reported to check that the run covered the rules.
    uint64_t events;            //  accepted events
    uint64_t commits;           //  commits with entries
    uint64_t applied;           //  entries applied
    uint64_t late_applied;      //  applied entries with tau > 0
    uint64_t drops;             //  gradients dropped
    uint64_t syncs;             //  ALSP syncs started
    uint64_t max_tau;           //  largest applied staleness
    uint64_t refused;           //  invalid events refused
} sim_t;

//  Next pseudo-random number (xorshift64*).
static uint64_t
s_rand (sim_t *sim)
{
    sim->seed ^= sim->seed >> 12;
    sim->seed ^= sim->seed << 25;
    sim->seed ^= sim->seed >> 27;
    return sim->seed * 2685821657736338717ull;
}

//  Uniform in [0, n).
static uint32_t
s_below (sim_t *sim, uint32_t n)
{
    return (uint32_t) (s_rand (sim) % n);
}

//  Quota rule, written again from the documentation.
static uint32_t
s_sim_quota (const sim_t *sim, uint32_t size)
{
    if (size == 0)
        return 0;
    if (sim->opts.model == KD_CONS_BSP)
        return size;
    double k = sim->opts.quota > 0 ? sim->opts.quota
             : ceil (sim->opts.quota_ratio * size - 1e-9);
    if (k < 1)
        k = 1;
    if (k > size)
        k = size;
    return (uint32_t) k;
}

//  Staleness bound of a gradient of rank for the model.
static uint64_t
s_sim_bound (const sim_t *sim, uint32_t rank)
{
    switch (sim->opts.model) {
        case KD_CONS_BSP:
            return 0;
        case KD_CONS_ASP:
            return UINT64_MAX;
        case KD_CONS_SSP: {
            //  SSP bounds clocks: while one worker computes a clock, every
            //  other worker session (those active at its release, and those
            //  admitted since) commits at most 2s + 1 gradients.
            uint64_t others = sim->rel_active [rank] - 1
                            + sim->admissions - sim->rel_admissions [rank];
            return others * (2 * (uint64_t) sim->opts.staleness + 1);
        }
        default:
            return sim->opts.staleness;
    }
}

//  Counts of the simulation's workers.
static void
s_sim_counts (const sim_t *sim, uint32_t *active, uint32_t *pending,
              uint32_t *computing, uint32_t *waiting)
{
    *active = *pending = *computing = *waiting = 0;
    for (uint32_t rank = 0; rank < sim->n_ranks; rank++) {
        *pending += sim->state [rank] == W_PENDING;
        *computing += sim->state [rank] == W_COMPUTING;
        *waiting += sim->state [rank] == W_WAITING;
    }
    *active = *computing + *waiting;
}

//  min_clock as documented: computing clock, or clock + 1 when waiting.
static uint64_t
s_sim_min_clock (const sim_t *sim, bool *any)
{
    uint64_t lowest = UINT64_MAX;
    for (uint32_t rank = 0; rank < sim->n_ranks; rank++) {
        uint64_t c = sim->state [rank] == W_COMPUTING ? sim->clock [rank]
                   : sim->state [rank] == W_WAITING ? sim->clock [rank] + 1
                   : UINT64_MAX;
        if (c < lowest)
            lowest = c;
    }
    *any = lowest != UINT64_MAX;
    return lowest;
}

//  Find and remove a staged gradient; fails if it was not staged.
static uint64_t
s_sim_unstage (sim_t *sim, uint32_t rank, uint64_t clock)
{
    cr_assert_lt (rank, sim->n_ranks, "unknown rank %u named", rank);
    for (int k = 0; k < STAGED_SLOTS; k++) {
        staged_t *slot = &sim->staged [rank][k];
        if (slot->used && slot->clock == clock) {
            slot->used = false;
            return slot->base;
        }
    }
    cr_assert_fail ("(%u, %lu) named but not staged (or named twice)",
                    rank, (unsigned long) clock);
    return 0;
}

//  True when (rank, clock) is still staged.
static bool
s_sim_is_staged (const sim_t *sim, uint32_t rank, uint64_t clock)
{
    for (int k = 0; k < STAGED_SLOTS; k++)
        if (sim->staged [rank][k].used && sim->staged [rank][k].clock == clock)
            return true;
    return false;
}

//  Waiting workers of a group, and its size.
static void
s_sim_group (const sim_t *sim, uint32_t g, uint32_t *size, uint32_t *waiting)
{
    *size = *waiting = 0;
    for (uint32_t rank = 0; rank < sim->n_ranks; rank++)
        if ((sim->state [rank] == W_COMPUTING || sim->state [rank] == W_WAITING)
        &&  kd_controller_group_of (sim->ctl, rank) == g) {
            (*size)++;
            *waiting += sim->state [rank] == W_WAITING;
        }
}

//  Check and apply one COMMIT: invariants 1 and 2.
static void
s_sim_commit (sim_t *sim, const rec_t *d, uint32_t active)
{
    uint64_t v_before = sim->v;
    if (d->n_entries > 0) {
        cr_assert_eq (d->version, sim->v + 1, "version %lu after %lu",
                      (unsigned long) d->version, (unsigned long) sim->v);
        sim->v++;
        sim->commits++;
    }
    else {
        cr_assert_eq (d->version, sim->v, "drop-only commit moved the version");
        cr_assert_gt (d->n_drops, 0, "empty commit");
    }
    double sum = 0;
    double fresh_weight = 0;
    uint32_t fresh = 0;
    for (size_t i = 0; i < d->n_entries; i++) {
        const kd_entry_t *e = &d->entries [i];
        uint64_t base = s_sim_unstage (sim, e->rank, e->clock);
        cr_assert_eq (e->staleness, v_before - base, "staleness of (%u, %lu)",
                      e->rank, (unsigned long) e->clock);
        cr_assert (e->weight > 0 && isfinite (e->weight), "weight %g", e->weight);
        cr_assert_leq (e->staleness, s_sim_bound (sim, e->rank),
                       "tau %lu over bound", (unsigned long) e->staleness);
        sum += e->weight;
        sim->applied++;
        sim->late_applied += e->staleness > 0;
        if (e->staleness > sim->max_tau)
            sim->max_tau = e->staleness;
        if (e->staleness == 0) {
            fresh++;
            fresh_weight = e->weight;
        }
    }
    for (size_t i = 0; i < d->n_drops; i++) {
        const kd_entry_t *e = &d->drops [i];
        uint64_t base = s_sim_unstage (sim, e->rank, e->clock);
        cr_assert_eq (e->staleness, v_before - base);
        cr_assert_eq (e->weight, 0);
        sim->dropped++;
        sim->drops++;
    }
    if (d->n_entries == 0)
        return;
    switch (sim->opts.model) {
        case KD_CONS_BSP:
            for (size_t i = 0; i < d->n_entries; i++)
                cr_assert_float_eq (d->entries [i].weight,
                                    1.0 / (double) d->n_entries, 1e-15);
            //  Invariant 3: the barrier holds every active worker.
            cr_assert_eq (d->n_entries, active, "BSP commit of %zu of %u",
                          d->n_entries, active);
            break;
        case KD_CONS_ASP:
        case KD_CONS_SSP:
            cr_assert_eq (d->n_entries, 1);
            cr_assert_eq (d->entries [0].weight, 1.0);
            break;
        case KD_CONS_LSP: {
            cr_assert_float_eq (sum, 1.0, EPS);
            //  Late entries weigh 1 / (1 + tau) of a fresh one.
            cr_assert_gt (fresh, 0);
            for (size_t i = 0; i < d->n_entries; i++)
                cr_assert_float_eq (d->entries [i].weight,
                    fresh_weight / (1.0 + (double) d->entries [i].staleness),
                    1e-12);
            //  Invariant 3: released at the quota, or by the window.
            uint32_t k = s_sim_quota (sim, active);
            bool by_window = sim->opts.window_ms > 0 && fresh >= 2
                          && sim->now >= sim->t_first [0] + sim->opts.window_ms;
            cr_assert (fresh >= k || by_window,
                       "LSP released %u fresh of K = %u", fresh, k);
            break;
        }
        case KD_CONS_ALSP:
            cr_assert (sum > 0 && sum <= 1.0 + EPS, "ALSP weight sum %g", sum);
            break;
    }
}

//  Check and apply one RELEASE.
static void
s_sim_release (sim_t *sim, const rec_t *d)
{
    uint32_t rank = d->rank;
    cr_assert_lt (rank, sim->n_ranks);
    wstate_t state = sim->state [rank];
    cr_assert (state == W_PENDING || state == W_WAITING,
               "release of rank %u in state %d", rank, state);
    cr_assert_eq (d->version, sim->v, "released on %lu, V is %lu",
                  (unsigned long) d->version, (unsigned long) sim->v);
    if (state == W_WAITING)
        cr_assert_eq (d->clock, sim->clock [rank] + 1);
    if (d->dropped)
        cr_assert_not (s_sim_is_staged (sim, rank, sim->clock [rank]),
                       "dropped flag but gradient still staged");
    if (state == W_PENDING)
        sim->admissions++;
    sim->state [rank] = W_COMPUTING;
    sim->clock [rank] = d->clock;
    sim->version [rank] = d->version;
    uint32_t active, pending, computing, waiting;
    s_sim_counts (sim, &active, &pending, &computing, &waiting);
    sim->rel_active [rank] = active;
    sim->rel_admissions [rank] = sim->admissions;
    //  Groups only change before releases, so this is its group now.
    cr_assert_eq (d->group, sim->opts.model == KD_CONS_ALSP
                            ? kd_controller_group_of (sim->ctl, rank) : 0);
}

//  Check and apply one GROUPS.
static void
s_sim_groups (sim_t *sim, const rec_t *d)
{
    cr_assert_eq (sim->opts.model, KD_CONS_ALSP, "GROUPS outside ALSP");
    cr_assert_eq (d->n_groups, sim->opts.max_workers);
    for (size_t rank = 0; rank < d->n_groups; rank++) {
        bool member = rank < sim->n_ranks
                   && (sim->state [rank] == W_COMPUTING
                   ||  sim->state [rank] == W_WAITING);
        if (member)
            cr_assert_lt (d->groups [rank], d->group_count);
        else
            cr_assert_eq (d->groups [rank], UINT32_MAX, "rank %zu", rank);
        if (rank < sim->n_ranks)
            sim->group [rank] = d->groups [rank];
    }
}

//  Apply the current event's decisions, then check the invariants that
//  hold between events.
static void
s_sim_settle (sim_t *sim)
{
    log_clear (&sim->log);
    log_drain (&sim->log, sim->ctl, false);
    if (sim->twin) {
        log_clear (&sim->twin_log);
        log_drain (&sim->twin_log, sim->twin, sim->twin_skip_groups);
        //  Compare against our log with GROUPS removed if asked.
        log_t filtered = { 0 };
        for (size_t i = 0; i < sim->log.n; i++) {
            if (sim->twin_skip_groups && sim->log.recs [i].type == KD_DEC_GROUPS)
                continue;
            if (filtered.n == filtered.cap) {
                filtered.cap = filtered.cap ? filtered.cap * 2 : 64;
                filtered.recs = realloc (filtered.recs, filtered.cap * sizeof (rec_t));
            }
            filtered.recs [filtered.n++] = sim->log.recs [i];
        }
        s_expect_same_logs (&filtered, &sim->twin_log, "twin");
        free (filtered.recs);
    }
    uint32_t active, pending, computing, waiting;
    s_sim_counts (sim, &active, &pending, &computing, &waiting);
    for (size_t i = 0; i < sim->log.n; i++) {
        const rec_t *d = &sim->log.recs [i];
        if (d->type == KD_DEC_COMMIT)
            s_sim_commit (sim, d, active);
        else
        if (d->type == KD_DEC_RELEASE)
            s_sim_release (sim, d);
        else
            s_sim_groups (sim, d);
        s_sim_counts (sim, &active, &pending, &computing, &waiting);
    }

    //  The controller agrees with the simulation.
    kd_controller_t *ctl = sim->ctl;
    cr_assert_eq (kd_controller_version (ctl), sim->v);
    cr_assert_eq (kd_controller_active (ctl), active);
    cr_assert_eq (kd_controller_dropped (ctl), sim->dropped);
    for (uint32_t rank = 0; rank < sim->n_ranks; rank++) {
        bool member = sim->state [rank] == W_COMPUTING
                   || sim->state [rank] == W_WAITING;
        cr_assert_eq (kd_controller_is_active (ctl, rank), member, "rank %u", rank);
    }
    bool any;
    uint64_t lowest = s_sim_min_clock (sim, &any);
    if (any)
        cr_assert_eq (kd_controller_min_clock (ctl), lowest);

    //  Invariant 3, liveness: if anyone waits, someone computes.
    if (waiting > 0)
        cr_assert_gt (computing, 0, "everybody waits");
    uint64_t window = sim->opts.model == KD_CONS_BSP ? 0 : sim->opts.window_ms;
    switch (sim->opts.model) {
        case KD_CONS_BSP: {
            cr_assert (waiting < active || active == 0);
            //  All active workers share the phase clock.
            for (uint32_t rank = 0; rank < sim->n_ranks; rank++)
                if (sim->state [rank] == W_COMPUTING || sim->state [rank] == W_WAITING)
                    cr_assert_eq (sim->clock [rank], lowest, "phase clock");
            if (pending > 0)
                cr_assert_gt (waiting, 0, "joiner held without a phase");
            break;
        }
        case KD_CONS_ASP:
            cr_assert_eq (waiting, 0, "ASP never waits");
            cr_assert_eq (pending, 0);
            break;
        case KD_CONS_SSP:
            cr_assert_eq (pending, 0);
            for (uint32_t rank = 0; rank < sim->n_ranks; rank++) {
                //  Invariant 5: nobody computes beyond min_clock + s.
                if (sim->state [rank] == W_COMPUTING)
                    cr_assert_leq (sim->clock [rank], lowest + sim->opts.staleness,
                                   "SSP clock %lu, min %lu",
                                   (unsigned long) sim->clock [rank],
                                   (unsigned long) lowest);
                //  A waiting worker really is held by the bound.
                if (sim->state [rank] == W_WAITING)
                    cr_assert_gt (sim->clock [rank] + 1,
                                  lowest + sim->opts.staleness);
            }
            break;
        case KD_CONS_LSP: {
            cr_assert_lt (waiting, s_sim_quota (sim, active) + (active == 0),
                          "LSP quota met but nobody released");
            if (window > 0 && waiting >= 2)
                cr_assert_lt (sim->now, sim->t_first [0] + window,
                              "LSP window passed but nobody released");
            for (uint32_t rank = 0; rank < sim->n_ranks; rank++)
                if (sim->state [rank] == W_WAITING)
                    cr_assert (s_sim_is_staged (sim, rank, sim->clock [rank]));
            if (pending > 0)
                cr_assert_gt (waiting, 0, "joiner held without a phase");
            break;
        }
        case KD_CONS_ALSP: {
            //  The published table is always current.
            for (uint32_t rank = 0; rank < sim->n_ranks; rank++)
                cr_assert_eq (sim->group [rank], kd_controller_group_of (ctl, rank),
                              "GROUPS not published for rank %u", rank);
            bool syncing = kd_controller_syncing (ctl);
            if (syncing && !sim->was_syncing)
                sim->syncs++;
            sim->was_syncing = syncing;
            if (syncing) {
                cr_assert (waiting < active, "sync complete but held");
                break;
            }
            memset (sim->g_size, 0, sim->n_ranks * sizeof (uint32_t));
            memset (sim->g_waiting, 0, sim->n_ranks * sizeof (uint32_t));
            for (uint32_t rank = 0; rank < sim->n_ranks; rank++) {
                uint32_t g = kd_controller_group_of (ctl, rank);
                if (g == UINT32_MAX)
                    continue;
                cr_assert_lt (g, sim->n_ranks);
                sim->g_size [g]++;
                sim->g_waiting [g] += sim->state [rank] == W_WAITING;
            }
            uint32_t slowest_waiting = 0;
            for (uint32_t g = 0; g < sim->n_ranks; g++) {
                uint32_t group_waiting = sim->g_waiting [g];
                if (sim->g_size [g] > 0)
                    slowest_waiting = group_waiting;
                cr_assert (group_waiting == 0
                        || group_waiting < s_sim_quota (sim, sim->g_size [g]),
                           "group %u quota met but held", g);
                if (window > 0 && group_waiting >= 2)
                    cr_assert_lt (sim->now, sim->t_first [g] + window,
                                  "group %u window passed but held", g);
            }
            if (pending > 0)
                cr_assert_gt (slowest_waiting, 0, "joiner held without a phase");
            break;
        }
    }
}

//  Set up a simulation around ctl (and an optional twin).
static void
s_sim_init (sim_t *sim, const kd_controller_opts_t *opts,
            const kd_controller_opts_t *twin_opts, uint32_t n_ranks,
            uint64_t seed)
{
    memset (sim, 0, sizeof *sim);
    sim->opts = *opts;
    sim->ctl = kd_controller_new (opts);
    cr_assert (sim->ctl);
    if (twin_opts) {
        sim->twin = kd_controller_new (twin_opts);
        cr_assert (sim->twin);
    }
    sim->n_ranks = n_ranks;
    sim->state = calloc (n_ranks, sizeof *sim->state);
    sim->clock = calloc (n_ranks, sizeof *sim->clock);
    sim->version = calloc (n_ranks, sizeof *sim->version);
    sim->speed = calloc (n_ranks, sizeof *sim->speed);
    sim->staged = calloc (n_ranks, sizeof *sim->staged);
    sim->t_first = calloc (n_ranks, sizeof *sim->t_first);
    sim->group = calloc (n_ranks, sizeof *sim->group);
    sim->g_size = calloc (n_ranks, sizeof *sim->g_size);
    sim->g_waiting = calloc (n_ranks, sizeof *sim->g_waiting);
    sim->rel_active = calloc (n_ranks, sizeof *sim->rel_active);
    sim->rel_admissions = calloc (n_ranks, sizeof *sim->rel_admissions);
    cr_assert (sim->state && sim->clock && sim->version && sim->speed
            && sim->staged && sim->t_first && sim->group && sim->g_size
            && sim->g_waiting && sim->rel_active && sim->rel_admissions);
    for (uint32_t rank = 0; rank < n_ranks; rank++)
        sim->group [rank] = UINT32_MAX;
    sim->seed = seed ? seed : 1;
    for (uint32_t rank = 0; rank < n_ranks; rank++)
        sim->speed [rank] = rank % 2 ? 3 : 1;
    sim->telemetry = true;
    sim->churn = true;
    sim->now = 1000;
}

//  Release everything a simulation holds.
static void
s_sim_destroy (sim_t *sim)
{
    kd_controller_destroy (&sim->ctl);
    kd_controller_destroy (&sim->twin);
    free (sim->state);
    free (sim->clock);
    free (sim->version);
    free (sim->speed);
    free (sim->staged);
    free (sim->t_first);
    free (sim->group);
    free (sim->g_size);
    free (sim->g_waiting);
    free (sim->rel_active);
    free (sim->rel_admissions);
    log_free (&sim->log);
    log_free (&sim->twin_log);
}

//  Both controllers see one event; results must agree.
#define SIM_CALL(sim, call, ...) \
    ({ int rc_ = call (sim->ctl, __VA_ARGS__); \
       if (sim->twin) \
           cr_assert_eq (call (sim->twin, __VA_ARGS__), rc_, #call " differs"); \
       rc_; })

//  Join a rank.
static void
s_sim_join (sim_t *sim, uint32_t rank)
{
    cr_assert_eq (SIM_CALL (sim, kd_controller_join, rank, sim->now), 0);
    sim->state [rank] = W_PENDING;
    sim->events++;
    s_sim_settle (sim);
}

//  Leave a rank: whatever it staged must be dropped in this event.
static void
s_sim_leave (sim_t *sim, uint32_t rank)
{
    cr_assert_eq (SIM_CALL (sim, kd_controller_leave, rank, sim->now), 0);
    sim->state [rank] = W_INACTIVE;
    sim->events++;
    s_sim_settle (sim);
    for (int k = 0; k < STAGED_SLOTS; k++)
        cr_assert_not (sim->staged [rank][k].used, "leaver's gradient not named");
}

//  A computing rank arrives with its clock and the base it was released on.
static void
s_sim_arrive (sim_t *sim, uint32_t rank)
{
    uint64_t clock = sim->clock [rank];
    uint64_t base = sim->version [rank];
    cr_assert_eq (SIM_CALL (sim, kd_controller_arrive, rank, clock, base, 32,
                            sim->now), 0);
    int k = 0;
    while (k < STAGED_SLOTS && sim->staged [rank][k].used)
        k++;
    cr_assert_lt (k, STAGED_SLOTS, "too many staged gradients");
    sim->staged [rank][k] = (staged_t) { true, clock, base };
    //  The phase of its group starts with its first arrival.
    uint32_t g = sim->opts.model == KD_CONS_ALSP
               ? kd_controller_group_of (sim->ctl, rank) : 0;
    uint32_t size, group_waiting;
    s_sim_group (sim, g, &size, &group_waiting);
    if (group_waiting == 0 && g < sim->n_ranks)
        sim->t_first [g] = sim->now;
    sim->state [rank] = W_WAITING;
    sim->arrived_rank = rank;
    sim->arrived_late = base < sim->v;
    sim->arrived_tau = sim->v - base;
    sim->events++;
    s_sim_settle (sim);
    //  Under LSP a late arrival is answered at once: queued, or dropped
    //  when over the bound (always with s = 0: backup workers).
    if (sim->opts.model == KD_CONS_LSP && sim->arrived_late) {
        cr_assert_eq (sim->state [rank], W_COMPUTING, "late worker held");
        int i = -1;
        for (size_t j = 0; j < sim->log.n; j++)
            if (sim->log.recs [j].type == KD_DEC_RELEASE
            &&  sim->log.recs [j].rank == rank)
                i = (int) j;
        cr_assert (i >= 0);
        cr_assert_eq (sim->log.recs [i].dropped,
                      sim->arrived_tau > sim->opts.staleness);
    }
    //  K = 1 and ASP: nobody ever waits.
    bool immediate = sim->opts.model == KD_CONS_ASP
                  || (sim->opts.model == KD_CONS_LSP && sim->opts.quota == 1);
    if (immediate)
        cr_assert_eq (sim->state [rank], W_COMPUTING, "arrival not released");
}

//  An invalid event of a random kind: refused, nothing emitted or changed.
static void
s_sim_invalid (sim_t *sim)
{
    snapshot_t before = s_snapshot (sim->ctl);
    uint32_t rank = s_below (sim, sim->n_ranks);
    wstate_t state = sim->state [rank];
    int rc;
    switch (s_below (sim, 5)) {
        case 0:
            if (state == W_COMPUTING)
                rc = SIM_CALL (sim, kd_controller_arrive, rank,
                               sim->clock [rank] + 1, sim->version [rank], 32,
                               sim->now);
            else
                rc = SIM_CALL (sim, kd_controller_arrive, rank, sim->clock [rank],
                               sim->version [rank], 32, sim->now);
            break;
        case 1:
            if (state != W_INACTIVE)
                rc = SIM_CALL (sim, kd_controller_join, rank, sim->now);
            else
                rc = SIM_CALL (sim, kd_controller_leave, rank, sim->now);
            break;
        case 2:
            if (state == W_COMPUTING)
                rc = SIM_CALL (sim, kd_controller_arrive, rank, sim->clock [rank],
                               sim->v + 1, 32, sim->now);
            else
                rc = SIM_CALL (sim, kd_controller_telemetry, rank,
                               state == W_PENDING || state == W_INACTIVE ? 10.0 : -1.0,
                               sim->now);
            break;
        case 3:
            rc = SIM_CALL (sim, kd_controller_arrive, sim->opts.max_workers, 0, 0,
                           32, sim->now);
            break;
        default:
            rc = SIM_CALL (sim, kd_controller_telemetry, rank, NAN, sim->now);
            break;
    }
    s_expect_refused (sim->ctl, &before, rc, "random invalid event");
    if (sim->twin)
        cr_assert_null (kd_controller_next (sim->twin));
    sim->refused++;
}

//  Pick a computing worker, slow ones less often; UINT32_MAX if none.
static uint32_t
s_sim_pick_computing (sim_t *sim)
{
    for (int attempt = 0; attempt < 64; attempt++) {
        uint32_t rank = s_below (sim, sim->n_ranks);
        if (sim->state [rank] == W_COMPUTING
        &&  s_below (sim, (uint32_t) sim->speed [rank]) == 0)
            return rank;
    }
    for (uint32_t rank = 0; rank < sim->n_ranks; rank++)
        if (sim->state [rank] == W_COMPUTING)
            return rank;
    return UINT32_MAX;
}

//  One random event.
static void
s_sim_step (sim_t *sim)
{
    sim->now += 1 + s_below (sim, 10);
    uint32_t active, pending, computing, waiting;
    s_sim_counts (sim, &active, &pending, &computing, &waiting);
    uint32_t roll = s_below (sim, 100);
    if (active + pending < 2 && sim->churn)
        roll = 56;
    if (roll < 55) {
        uint32_t rank = s_sim_pick_computing (sim);
        if (rank != UINT32_MAX)
            s_sim_arrive (sim, rank);
        return;
    }
    if (roll < 63 && sim->churn) {
        uint32_t rank = s_below (sim, sim->n_ranks);
        if (sim->state [rank] == W_INACTIVE)
            s_sim_join (sim, rank);
        return;
    }
    if (roll < 67 && sim->churn) {
        uint32_t rank = s_below (sim, sim->n_ranks);
        if (sim->state [rank] != W_INACTIVE)
            s_sim_leave (sim, rank);
        return;
    }
    if (roll < 82 && sim->telemetry) {
        uint32_t rank = s_below (sim, sim->n_ranks);
        if (s_below (sim, 50) == 0)
            sim->speed [rank] = sim->speed [rank] == 1 ? 3 : 1;
        if (sim->state [rank] == W_COMPUTING || sim->state [rank] == W_WAITING) {
            double iter_ms = 10.0 * sim->speed [rank]
                           * (0.9 + 0.2 * (double) s_below (sim, 1000) / 1000);
            cr_assert_eq (SIM_CALL (sim, kd_controller_telemetry, rank, iter_ms,
                                    sim->now), 0);
            sim->events++;
            s_sim_settle (sim);
        }
        return;
    }
    if (roll < 97) {
        sim->now += s_below (sim, 60);
        kd_controller_tick (sim->ctl, sim->now);
        if (sim->twin)
            kd_controller_tick (sim->twin, sim->now);
        sim->events++;
        s_sim_settle (sim);
        return;
    }
    s_sim_invalid (sim);
}

//  Run a random simulation: warm up with every rank, play `events` random
//  events, let the joiners in with arrivals only, then everyone leaves.
static void
s_sim_run (sim_t *sim, uint32_t events)
{
    uint32_t first = sim->churn ? sim->n_ranks / 2 + 1 : sim->n_ranks;
    for (uint32_t rank = 0; rank < first; rank++)
        if (sim->state [rank] == W_INACTIVE)
            s_sim_join (sim, rank);
    for (uint32_t i = 0; i < events; i++)
        s_sim_step (sim);

    //  Liveness: with only arrivals and ticks, every joiner gets in.
    for (uint32_t i = 0; i < 100 * sim->n_ranks; i++) {
        uint32_t active, pending, computing, waiting;
        s_sim_counts (sim, &active, &pending, &computing, &waiting);
        if (pending == 0)
            break;
        uint32_t rank = s_sim_pick_computing (sim);
        cr_assert_neq (rank, UINT32_MAX);
        sim->now += 5;
        s_sim_arrive (sim, rank);
    }
    uint32_t active, pending, computing, waiting;
    s_sim_counts (sim, &active, &pending, &computing, &waiting);
    cr_assert_eq (pending, 0, "a joiner was never admitted");

    //  Everyone leaves: every staged gradient must have been named once.
    for (uint32_t rank = 0; rank < sim->n_ranks; rank++)
        if (sim->state [rank] != W_INACTIVE)
            s_sim_leave (sim, rank);
    kd_controller_tick (sim->ctl, sim->now + 100000);
    if (sim->twin)
        kd_controller_tick (sim->twin, sim->now + 100000);
    s_sim_settle (sim);
    for (uint32_t rank = 0; rank < sim->n_ranks; rank++)
        for (int k = 0; k < STAGED_SLOTS; k++)
            cr_assert_not (sim->staged [rank][k].used,
                           "(%u, %lu) never named", rank,
                           (unsigned long) sim->staged [rank][k].clock);
    cr_assert_eq (kd_controller_active (sim->ctl), 0);
    cr_assert_geq (sim->events, events / 2, "too few accepted events");
}

//  Default options for a model, with the random driver's tweaks.
static kd_controller_opts_t
s_random_opts (kd_consistency_t model)
{
    kd_controller_opts_t opts;
    kd_controller_opts_defaults (&opts, model);
    opts.staleness = 2;
    opts.regroup_dwell_ms = 1500;
    opts.global_sync_every = 4;
    return opts;
}

Test (kd_controller, random_bsp)
{
    kd_controller_opts_t opts = s_random_opts (KD_CONS_BSP);
    sim_t sim;
    s_sim_init (&sim, &opts, NULL, RANDOM_RANKS, 11);
    s_sim_run (&sim, RANDOM_EVENTS);
    cr_expect_gt (sim.commits, 500);
    cr_expect_eq (sim.max_tau, 0);
    cr_expect_gt (sim.drops, 0, "leaves dropped nothing");
    s_sim_destroy (&sim);
}

Test (kd_controller, random_asp)
{
    kd_controller_opts_t opts = s_random_opts (KD_CONS_ASP);
    sim_t sim;
    s_sim_init (&sim, &opts, NULL, RANDOM_RANKS, 12);
    s_sim_run (&sim, RANDOM_EVENTS);
    cr_expect_gt (sim.commits, 5000);
    cr_expect_gt (sim.max_tau, 2, "ASP should see stale gradients");
    cr_expect_eq (sim.drops, 0);
    s_sim_destroy (&sim);
}

Test (kd_controller, random_ssp)
{
    kd_controller_opts_t opts = s_random_opts (KD_CONS_SSP);
    sim_t sim;
    s_sim_init (&sim, &opts, NULL, RANDOM_RANKS, 13);
    s_sim_run (&sim, RANDOM_EVENTS);
    cr_expect_gt (sim.commits, 5000);
    s_sim_destroy (&sim);
    //  s = 0 is the tightest bound.
    opts.staleness = 0;
    s_sim_init (&sim, &opts, NULL, RANDOM_RANKS, 14);
    s_sim_run (&sim, RANDOM_EVENTS);
    s_sim_destroy (&sim);
}

Test (kd_controller, random_lsp)
{
    kd_controller_opts_t opts = s_random_opts (KD_CONS_LSP);
    sim_t sim;
    s_sim_init (&sim, &opts, NULL, RANDOM_RANKS, 15);
    s_sim_run (&sim, RANDOM_EVENTS);
    cr_expect_gt (sim.commits, 1000);
    cr_expect_gt (sim.late_applied, 100, "late gradients applied");
    cr_expect_gt (sim.drops, 100, "over-delayed gradients dropped");
    s_sim_destroy (&sim);
    //  With a release window.
    opts.window_ms = 30;
    s_sim_init (&sim, &opts, NULL, RANDOM_RANKS, 16);
    s_sim_run (&sim, RANDOM_EVENTS);
    s_sim_destroy (&sim);
}

Test (kd_controller, random_alsp)
{
    //  min_group 1 keeps bands tight, so speed changes keep regrouping (a
    //  lone outlier merged into a group widens its band; see the docs).
    kd_controller_opts_t opts = s_random_opts (KD_CONS_ALSP);
    opts.min_group = 1;
    sim_t sim;
    s_sim_init (&sim, &opts, NULL, RANDOM_RANKS, 17);
    s_sim_run (&sim, RANDOM_EVENTS);
    cr_expect_gt (sim.commits, 1000);
    cr_expect_gt (kd_controller_regroups (sim.ctl), 3, "regroups happened");
    cr_expect_gt (sim.syncs, 10, "global syncs happened");
    s_sim_destroy (&sim);
    //  Default min_group, with a window and a tighter bound.
    opts.min_group = 2;
    opts.window_ms = 30;
    opts.staleness = 1;
    s_sim_init (&sim, &opts, NULL, RANDOM_RANKS, 18);
    s_sim_run (&sim, RANDOM_EVENTS);
    cr_expect_gt (kd_controller_regroups (sim.ctl), 0);
    cr_expect_gt (sim.syncs, 10);
    s_sim_destroy (&sim);
}

Test (kd_controller, random_lsp_full_quota_no_staleness_is_bsp)
{
    kd_controller_opts_t bsp = s_random_opts (KD_CONS_BSP);
    kd_controller_opts_t lsp = s_random_opts (KD_CONS_LSP);
    lsp.quota_ratio = 1.0;
    lsp.staleness = 0;
    sim_t sim;
    s_sim_init (&sim, &bsp, &lsp, RANDOM_RANKS, 21);
    s_sim_run (&sim, RANDOM_EVENTS);
    cr_expect_gt (sim.commits, 500);
    s_sim_destroy (&sim);
}

Test (kd_controller, random_lsp_backup_workers)
{
    //  A fixed set of 8 workers, K = 6 = N - 2, s = 0.
    kd_controller_opts_t opts = s_random_opts (KD_CONS_LSP);
    opts.quota = 6;
    opts.staleness = 0;
    sim_t sim;
    s_sim_init (&sim, &opts, NULL, 8, 22);
    sim.churn = false;
    s_sim_run (&sim, RANDOM_EVENTS);
    cr_expect_eq (sim.late_applied, 0, "backup workers apply no late gradient");
    cr_expect_gt (sim.drops, 100, "stragglers' gradients dropped");
    s_sim_destroy (&sim);
}

Test (kd_controller, random_lsp_quota_one_is_bounded_asp)
{
    kd_controller_opts_t opts = s_random_opts (KD_CONS_LSP);
    opts.quota = 1;
    opts.staleness = 3;
    sim_t sim;
    s_sim_init (&sim, &opts, NULL, RANDOM_RANKS, 23);
    s_sim_run (&sim, RANDOM_EVENTS);
    cr_expect_gt (sim.late_applied, 100);
    cr_expect_leq (sim.max_tau, 3);
    s_sim_destroy (&sim);
}

Test (kd_controller, random_alsp_without_telemetry_is_lsp)
{
    kd_controller_opts_t alsp = s_random_opts (KD_CONS_ALSP);
    kd_controller_opts_t lsp = s_random_opts (KD_CONS_LSP);
    alsp.window_ms = lsp.window_ms = 30;
    sim_t sim;
    s_sim_init (&sim, &alsp, &lsp, RANDOM_RANKS, 24);
    sim.telemetry = false;
    sim.twin_skip_groups = true;
    s_sim_run (&sim, RANDOM_EVENTS);
    cr_expect_gt (sim.commits, 1000);
    cr_expect_eq (sim.syncs, 0);
    s_sim_destroy (&sim);
}


//  --------------------------------------------------------------------------
//  Scale: 1024 workers

//  Run `rounds` rounds in which every computing worker arrives once.
static void
s_scale_rounds (sim_t *sim, int rounds)
{
    for (int round = 0; round < rounds; round++)
        for (uint32_t rank = 0; rank < sim->n_ranks; rank++)
            if (sim->state [rank] == W_COMPUTING) {
                sim->now += 1;
                s_sim_arrive (sim, rank);
            }
}

Test (kd_controller, scale_1024_workers)
{
    kd_consistency_t models [] = { KD_CONS_BSP, KD_CONS_SSP, KD_CONS_LSP,
                                   KD_CONS_ALSP };
    for (size_t m = 0; m < sizeof models / sizeof models [0]; m++) {
        kd_controller_opts_t opts;
        kd_controller_opts_defaults (&opts, models [m]);
        opts.regroup_dwell_ms = 100;
        sim_t sim;
        s_sim_init (&sim, &opts, NULL, 1024, 31 + m);
        for (uint32_t rank = 0; rank < 1024; rank++)
            s_sim_join (&sim, rank);
        s_scale_rounds (&sim, 3);
        if (models [m] == KD_CONS_ALSP) {
            //  Half fast, half slow: two groups.
            for (int i = 0; i < 3; i++)
                for (uint32_t rank = 0; rank < 1024; rank++) {
                    cr_assert_eq (kd_controller_telemetry (sim.ctl, rank,
                                  rank < 512 ? 10 : 40, sim.now), 0);
                    s_sim_settle (&sim);
                }
            sim.now += 1000;
            kd_controller_tick (sim.ctl, sim.now);
            s_sim_settle (&sim);
            s_scale_rounds (&sim, 2);
            cr_expect_eq (kd_controller_group_of (sim.ctl, 0), 0);
            cr_expect_eq (kd_controller_group_of (sim.ctl, 1023), 1);
        }
        s_scale_rounds (&sim, 3);
        cr_expect_gt (sim.commits, 3);
        s_sim_destroy (&sim);
    }
}

static void
s_resume_at_500 (kd_controller_opts_t *opts)
{
    opts->initial_version = 500;
}

Test (kd_controller, initial_version_resumes_every_model)
{
    //  A restarted scheduler resumes from the shards' version: releases
    //  name it, gradients computed on it are fresh, and the next commit
    //  creates the version after it.
    for (int model = KD_CONS_BSP; model <= KD_CONS_ALSP; model++) {
        kd_controller_t *ctl = s_new ((kd_consistency_t) model, NULL, s_resume_at_500);
        cr_assert_eq (kd_controller_version (ctl), 500);
        s_join_all (ctl, 2, 0);
        s_expect_release (0, 500, 0);
        s_expect_release (1, 500, 0);
        s_arrive (ctl, 0, 0, 500, 10);
        s_arrive (ctl, 1, 0, 500, 10);
        //  Whatever the model, two arrivals on 500 commit at least once.
        cr_expect_geq (kd_controller_version (ctl), 501, "model %d", model);
        log_clear (&s_log);
        kd_controller_destroy (&ctl);
    }
}
