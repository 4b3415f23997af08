/*  kd_history_check: reads a run's history and says whether anything was
    lost.  See kd_history_check.h for what is checked; docs/chaos.md for the
    lines.

    Feeding keeps what each line says, in a few arrays and hashes; the
    per-process version check runs as lines come (it only needs its own
    file's order).  kd_history_check_run then sorts every shard's applies
    by time, resolves each applied gradient to the lease its worker
    computed it on (the scheduler's newest lease of that rank and clock
    sent before the apply), and counts each range's rows per epoch.
*/
#define _GNU_SOURCE    //  vasprintf, open_memstream
#include "kd_history_check.h"
#include "kd_fault_plan.h"
#include <assert.h>
#include <czmq.h>
#include <dirent.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_RANGES        64          //  key ranges (kd_config: shards <= 64)
#define S_MAX_SOURCES       512         //  history files of one run
#define S_RECOVERY_WINDOW   15000000    //  us after a fault within which its
                                        //  stall is measured
#define S_MAX_EPOCHS        100000      //  epochs a history may name

typedef struct {
    uint64_t t;                 //  us: when the RELEASE went out
    uint64_t epoch, pos;        //  the lease's permutation and first position
    uint32_t count;             //  its rows
} s_lease_t;

typedef struct {
    s_lease_t *v;               //  in the scheduler's order (owned)
    size_t n, cap;              //  in use, allocated
} s_leases_t;

typedef struct {
    uint64_t t;                 //  us
    uint64_t lo, version;       //  range and the version the step made
    size_t n;                   //  gradients in it
    uint64_t *ranks, *clocks;   //  n each (owned)
    uint64_t missing;           //  gradients the commit named that it lacked
    char source [32];           //  shard-N
} s_apply_t;

typedef struct {
    uint64_t lo, version;       //  range, version at exit
    char crc [16];              //  params_crc
    char source [32];           //  shard-N
} s_final_t;

typedef struct {
    uint64_t t, t_end;          //  us: fired, and over (a pause's SIGCONT)
    char kind [16];             //  kd_fault_kind_name
    char target [48];           //  the process it hit
    bool fired;                 //  false: it could not be fired (note says why)
    char note [160];            //  why not
} s_fault_t;

typedef struct {
    uint64_t t;                 //  us
    char name [32];             //  service
    int pid;                    //  its process
    double rss_kb, fds;         //  the figures
} s_sample_t;

typedef struct {
    char source [32];           //  shard-N
    int pid;                    //  its current process
    uint64_t version;           //  the last version it stood at
    bool any;                   //  version is valid
} s_incarnation_t;

typedef struct {
    uint64_t lo;                //  its first key
    zhashx_t *versions;         //  version -> signature of its gradients
    zhashx_t *grads;            //  rank/clock/epoch/pos -> version + 1
    uint8_t **counts;           //  per epoch: times each position was applied
    size_t n_epochs;            //  counts allocated
    bool any;                   //  something was applied
} s_range_t;

typedef struct {
    char kind [16];             //  fault kind
    size_t injected, survived;  //  how many, how many recovered
    double worst_ms;            //  longest stall after one
} s_kind_stat_t;

struct _kd_history_check_t {
    zhashx_t *leases;           //  "rank/clock" -> s_leases_t
    s_apply_t *applies;         //  every apply line
    size_t n_applies, cap_applies;
    s_final_t *finals;          //  every final line
    size_t n_finals, cap_finals;
    s_fault_t *faults;          //  every fault line
    size_t n_faults, cap_faults;
    s_sample_t *samples;        //  every resource sample
    size_t n_samples, cap_samples;
    uint64_t *commits;          //  us of each commit the scheduler decided
    size_t n_commits, cap_commits;
    s_incarnation_t inc [S_MAX_SOURCES];    //  each shard file's process
    size_t n_inc;               //  in use
    //  The scheduler's start and end
    bool started, ended;        //  lines seen
    uint64_t t_start, t_end;    //  us
    uint64_t rows, ranges, replicas;    //  rows per epoch, key ranges, replicas
    char reason [32];           //  why it ended
    char consistency [16];      //  the run's model
    uint64_t epochs_completed;  //  as its sampler counted
    //  kudus local and kd_chaos
    size_t restarts;            //  restarts kudus local made
    bool chaos;                 //  a chaos run (its lines were fed)
    char command [2048];        //  the command that reproduces it
    double soak_s;              //  its length
    double peers;               //  processes of the cluster: descriptors
                                //  may grow by one connection to each
    bool done;                  //  its done line was seen
    int local_code;             //  kudus local's exit code
    size_t leftovers;           //  processes left behind
    size_t malformed;           //  lines that were not JSON objects
    //  Findings
    char **failures;            //  sentences (owned)
    size_t n_failures, cap_failures;
    uint64_t rows_lost, rows_twice, grads_twice, unleased;
    s_kind_stat_t kinds [KD_FAULT_KINDS + 1];   //  per fault kind
    size_t n_kinds;             //  in use
    double growth_rss, growth_fds;  //  largest growth seen (fraction)
    char growth_rss_who [48], growth_fds_who [48];  //  whose
    size_t sampled;             //  processes judged
};

//  --------------------------------------------------------------------------
//  Small helpers

//  Append a failure sentence.
static void
s_fail (kd_history_check_t *self, const char *fmt, ...)
{
    if (self->n_failures == self->cap_failures) {
        self->cap_failures = self->cap_failures ? 2 * self->cap_failures : 16;
        self->failures = (char **) realloc (self->failures, self->cap_failures * sizeof (char *));
        assert (self->failures);
    }
    va_list args;
    va_start (args, fmt);
    char *s = NULL;
    if (vasprintf (&s, fmt, args) < 0)
        abort ();
    va_end (args);
    self->failures [self->n_failures++] = s;
}

//  Grow an array to hold one more element.
static void *
s_grow (void *array, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return array;
    *cap = *cap ? 2 * *cap : 2;    //  most (rank, clock) have one lease
    array = realloc (array, *cap * size);
    assert (array);
    return array;
}

static uint64_t
s_u (json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex (o, key, &v) ? (uint64_t) json_object_get_int64 (v) : 0;
}

static const char *
s_s (json_object *o, const char *key)
{
    json_object *v;
    const char *s = json_object_object_get_ex (o, key, &v) ? json_object_get_string (v) : NULL;
    return s ? s : "";
}

static bool
s_b (json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex (o, key, &v) && json_object_get_boolean (v);
}

//  A JSON array of integers into a new array; its length in *n.
static uint64_t *
s_uints (json_object *o, const char *key, size_t *n)
{
    json_object *v;
    *n = 0;
    if (!json_object_object_get_ex (o, key, &v) || !json_object_is_type (v, json_type_array))
        return NULL;
    *n = json_object_array_length (v);
    uint64_t *out = (uint64_t *) malloc ((*n + 1) * sizeof (uint64_t));
    assert (out);
    for (size_t i = 0; i < *n; i++)
        out [i] = (uint64_t) json_object_get_int64 (json_object_array_get_idx (v, i));
    return out;
}

static void
s_leases_destroy (void **item)
{
    s_leases_t *l = (s_leases_t *) *item;
    if (l) {
        free (l->v);
        free (l);
        *item = NULL;
    }
}

static void
s_str_destroy (void **item)
{
    free (*item);
    *item = NULL;
}

//  --------------------------------------------------------------------------
//  Construction

kd_history_check_t *
kd_history_check_new (void)
{
    kd_history_check_t *self = (kd_history_check_t *) calloc (1, sizeof (kd_history_check_t));
    assert (self);
    self->leases = zhashx_new ();
    zhashx_set_destructor (self->leases, s_leases_destroy);
    self->local_code = -1;
    return self;
}

//  Forget the findings of an earlier run.
static void
s_findings_reset (kd_history_check_t *self)
{
    for (size_t i = 0; i < self->n_failures; i++)
        free (self->failures [i]);
    self->n_failures = 0;
    self->rows_lost = self->rows_twice = self->grads_twice = self->unleased = 0;
    self->n_kinds = 0;
    self->growth_rss = self->growth_fds = 0;
    self->growth_rss_who [0] = self->growth_fds_who [0] = 0;
    self->sampled = 0;
}

void
kd_history_check_destroy (kd_history_check_t **self_p)
{
    assert (self_p);
    kd_history_check_t *self = *self_p;
    if (!self)
        return;
    s_findings_reset (self);
    free (self->failures);
    zhashx_destroy (&self->leases);
    for (size_t i = 0; i < self->n_applies; i++) {
        free (self->applies [i].ranks);
        free (self->applies [i].clocks);
    }
    free (self->applies);
    free (self->finals);
    free (self->faults);
    free (self->samples);
    free (self->commits);
    free (self);
    *self_p = NULL;
}

//  --------------------------------------------------------------------------
//  Feeding

//  The incarnation record of a shard's file.
static s_incarnation_t *
s_incarnation (kd_history_check_t *self, const char *source)
{
    for (size_t i = 0; i < self->n_inc; i++)
        if (!strcmp (self->inc [i].source, source))
            return &self->inc [i];
    if (self->n_inc == S_MAX_SOURCES)
        return NULL;
    s_incarnation_t *inc = &self->inc [self->n_inc++];
    snprintf (inc->source, sizeof inc->source, "%s", source);
    return inc;
}

//  A shard's line: its versions must only go up while one process lives.
static void
s_on_shard (kd_history_check_t *self, const char *source, const char *ev, json_object *o)
{
    s_incarnation_t *inc = s_incarnation (self, source);
    int pid = (int) s_u (o, "pid");
    uint64_t version = s_u (o, "version");
    if (inc && (inc->pid != pid || !strcmp (ev, "open"))) {
        inc->pid = pid;
        inc->any = false;
    }
    if (!strcmp (ev, "apply")) {
        if (inc && inc->any && version <= inc->version)
            s_fail (self, "%s pid %d applied version %llu after version %llu: versions went back",
                    source, pid, (unsigned long long) version, (unsigned long long) inc->version);
        self->applies = (s_apply_t *) s_grow (self->applies, &self->cap_applies, self->n_applies,
                                              sizeof (s_apply_t));
        s_apply_t *a = &self->applies [self->n_applies++];
        memset (a, 0, sizeof *a);
        a->t = s_u (o, "t");
        a->lo = s_u (o, "lo");
        a->version = version;
        a->missing = s_u (o, "missing");
        size_t nc = 0;
        a->ranks = s_uints (o, "ranks", &a->n);
        a->clocks = s_uints (o, "clocks", &nc);
        if (nc < a->n)
            a->n = nc;
        snprintf (a->source, sizeof a->source, "%s", source);
        if (s_b (o, "truncated"))
            s_fail (self, "%s: the apply of version %llu was too long to record", source,
                    (unsigned long long) version);
    }
    else
    if (!strcmp (ev, "final")) {
        self->finals = (s_final_t *) s_grow (self->finals, &self->cap_finals, self->n_finals,
                                             sizeof (s_final_t));
        s_final_t *f = &self->finals [self->n_finals++];
        f->lo = s_u (o, "lo");
        f->version = version;
        snprintf (f->crc, sizeof f->crc, "%s", s_s (o, "params_crc"));
        snprintf (f->source, sizeof f->source, "%s", source);
    }
    if (inc && (!strcmp (ev, "apply") || !strcmp (ev, "sync") || !strcmp (ev, "resync"))) {
        inc->version = version;
        inc->any = true;
    }
}

static void
s_on_scheduler (kd_history_check_t *self, const char *ev, json_object *o)
{
    if (!strcmp (ev, "start")) {
        self->started = true;
        self->t_start = s_u (o, "t");
        self->rows = s_u (o, "rows");
        self->ranges = s_u (o, "ranges");
        self->replicas = s_u (o, "replicas");
        snprintf (self->consistency, sizeof self->consistency, "%s", s_s (o, "consistency"));
    }
    else
    if (!strcmp (ev, "lease")) {
        char key [48];
        snprintf (key, sizeof key, "%llu/%llu", (unsigned long long) s_u (o, "rank"),
                  (unsigned long long) s_u (o, "clock"));
        s_leases_t *l = (s_leases_t *) zhashx_lookup (self->leases, key);
        if (!l) {
            l = (s_leases_t *) calloc (1, sizeof (s_leases_t));
            assert (l);
            zhashx_insert (self->leases, key, l);
        }
        l->v = (s_lease_t *) s_grow (l->v, &l->cap, l->n, sizeof (s_lease_t));
        l->v [l->n++] = (s_lease_t) { .t = s_u (o, "t"), .epoch = s_u (o, "epoch"),
                                      .pos = s_u (o, "pos"), .count = (uint32_t) s_u (o, "count") };
    }
    else
    if (!strcmp (ev, "commit")) {
        json_object *v;
        bool named = json_object_object_get_ex (o, "ranks", &v) && json_object_array_length (v) > 0;
        if (named) {
            self->commits = (uint64_t *) s_grow (self->commits, &self->cap_commits, self->n_commits,
                                                 sizeof (uint64_t));
            self->commits [self->n_commits++] = s_u (o, "t");
        }
    }
    else
    if (!strcmp (ev, "end")) {
        self->ended = true;
        self->t_end = s_u (o, "t");
        self->epochs_completed = s_u (o, "epochs_completed");
        snprintf (self->reason, sizeof self->reason, "%s", s_s (o, "reason"));
    }
}

static void
s_on_chaos (kd_history_check_t *self, const char *ev, json_object *o)
{
    self->chaos = true;
    if (!strcmp (ev, "begin")) {
        snprintf (self->command, sizeof self->command, "%s", s_s (o, "command"));
        self->soak_s = (double) s_u (o, "soak_ms") / 1000;
        self->peers = (double) s_u (o, "peers");
    }
    else
    if (!strcmp (ev, "fault")) {
        self->faults = (s_fault_t *) s_grow (self->faults, &self->cap_faults, self->n_faults,
                                             sizeof (s_fault_t));
        s_fault_t *f = &self->faults [self->n_faults++];
        memset (f, 0, sizeof *f);
        f->t = s_u (o, "t");
        f->t_end = f->t + s_u (o, "duration_ms") * 1000;
        f->fired = s_b (o, "fired");
        snprintf (f->kind, sizeof f->kind, "%s", s_s (o, "kind"));
        snprintf (f->target, sizeof f->target, "%s", s_s (o, "target"));
        snprintf (f->note, sizeof f->note, "%s", s_s (o, "note"));
    }
    else
    if (!strcmp (ev, "sample")) {
        self->samples = (s_sample_t *) s_grow (self->samples, &self->cap_samples, self->n_samples,
                                               sizeof (s_sample_t));
        s_sample_t *s = &self->samples [self->n_samples++];
        s->t = s_u (o, "t");
        snprintf (s->name, sizeof s->name, "%s", s_s (o, "name"));
        s->pid = (int) s_u (o, "child");
        s->rss_kb = (double) s_u (o, "rss_kb");
        s->fds = (double) s_u (o, "fds");
    }
    else
    if (!strcmp (ev, "leftover")) {
        self->leftovers++;
        s_fail (self, "%s pid %d was still running after the cluster stopped", s_s (o, "name"),
                (int) s_u (o, "child"));
    }
    else
    if (!strcmp (ev, "done")) {
        self->done = true;
        self->local_code = (int) s_u (o, "code");
    }
}

int
kd_history_check_line (kd_history_check_t *self, const char *source, const char *line)
{
    assert (self && source && line);
    if (!*line)
        return 0;
    json_object *o = json_tokener_parse (line);
    if (!o || !json_object_is_type (o, json_type_object)) {
        json_object_put (o);
        self->malformed++;
        return -2;
    }
    const char *ev = s_s (o, "ev");
    if (!strcmp (source, "scheduler"))
        s_on_scheduler (self, ev, o);
    else
    if (!strcmp (source, "chaos"))
        s_on_chaos (self, ev, o);
    else
    if (!strcmp (source, "local")) {
        if (!strcmp (ev, "restart"))
            self->restarts++;
    }
    else
        s_on_shard (self, source, ev, o);
    json_object_put (o);
    return 0;
}

int
kd_history_check_load (kd_history_check_t *self, const char *dir, char *err, size_t err_size)
{
    DIR *d = opendir (dir);
    if (!d) {
        snprintf (err, err_size, "cannot read %s: %s", dir, strerror (errno));
        return -1;
    }
    struct dirent *e;
    char *line = NULL;
    size_t cap = 0;
    while ((e = readdir (d))) {
        size_t len = strlen (e->d_name);
        if (len < 7 || strcmp (e->d_name + len - 6, ".jsonl") || len - 6 >= 32)
            continue;
        char source [32], path [2048];
        snprintf (source, sizeof source, "%.*s", (int) (len - 6), e->d_name);
        if (strcmp (source, "scheduler") && strcmp (source, "local") && strcmp (source, "chaos")
        &&  strncmp (source, "shard-", 6))
            continue;
        int fit = snprintf (path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fit > 0 && (size_t) fit < sizeof path ? fopen (path, "r") : NULL;
        if (!f)
            continue;
        ssize_t n;
        while ((n = getline (&line, &cap, f)) > 0) {
            if (line [n - 1] == '\n')
                line [n - 1] = 0;
            kd_history_check_line (self, source, line);
        }
        fclose (f);
    }
    free (line);
    closedir (d);
    return 0;
}

//  --------------------------------------------------------------------------
//  Checking

static int
s_by_time (const void *a, const void *b)
{
    const s_apply_t *x = (const s_apply_t *) a, *y = (const s_apply_t *) b;
    return x->t < y->t ? -1 : x->t > y->t;
}

//  The lease rank/clock was computed on when it was applied at t, or NULL.
static const s_lease_t *
s_lease_of (kd_history_check_t *self, uint64_t rank, uint64_t clock, uint64_t t)
{
    char key [48];
    snprintf (key, sizeof key, "%llu/%llu", (unsigned long long) rank, (unsigned long long) clock);
    s_leases_t *l = (s_leases_t *) zhashx_lookup (self->leases, key);
    for (size_t i = l ? l->n : 0; i > 0; i--)
        if (l->v [i - 1].t <= t)
            return &l->v [i - 1];
    return NULL;
}

static s_range_t *
s_range (s_range_t *ranges, size_t *n, uint64_t lo)
{
    for (size_t i = 0; i < *n; i++)
        if (ranges [i].lo == lo)
            return &ranges [i];
    if (*n == S_MAX_RANGES)
        return NULL;
    s_range_t *r = &ranges [(*n)++];
    memset (r, 0, sizeof *r);
    r->lo = lo;
    r->versions = zhashx_new ();
    zhashx_set_destructor (r->versions, s_str_destroy);
    r->grads = zhashx_new ();
    return r;
}

static int
s_pair_cmp (const void *a, const void *b)
{
    const uint64_t *x = (const uint64_t *) a, *y = (const uint64_t *) b;
    if (x [0] != y [0])
        return x [0] < y [0] ? -1 : 1;
    return x [1] < y [1] ? -1 : x [1] > y [1];
}

//  The gradients of an apply as one sorted string, to compare replicas.
static char *
s_signature (const s_apply_t *a)
{
    uint64_t *pairs = (uint64_t *) malloc ((2 * a->n + 1) * sizeof (uint64_t));
    assert (pairs);
    for (size_t i = 0; i < a->n; i++) {
        pairs [2 * i] = a->ranks [i];
        pairs [2 * i + 1] = a->clocks [i];
    }
    qsort (pairs, a->n, 2 * sizeof (uint64_t), s_pair_cmp);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream (&text, &len);
    for (size_t i = 0; i < a->n; i++)
        fprintf (f, "%llu/%llu,", (unsigned long long) pairs [2 * i], (unsigned long long) pairs [2 * i + 1]);
    fclose (f);
    free (pairs);
    return text;
}

//  Count one applied gradient's rows on its range.
static void
s_count_rows (kd_history_check_t *self, s_range_t *r, const s_lease_t *lease)
{
    if (lease->epoch >= S_MAX_EPOCHS || lease->pos + lease->count > self->rows) {
        s_fail (self, "range %llu: a lease outside the epochs (epoch %llu, positions %llu..%llu of %llu)",
                (unsigned long long) r->lo, (unsigned long long) lease->epoch,
                (unsigned long long) lease->pos, (unsigned long long) (lease->pos + lease->count),
                (unsigned long long) self->rows);
        return;
    }
    if (lease->epoch >= r->n_epochs) {
        size_t n = (size_t) lease->epoch + 1;
        r->counts = (uint8_t **) realloc (r->counts, n * sizeof (uint8_t *));
        assert (r->counts);
        for (size_t e = r->n_epochs; e < n; e++) {
            r->counts [e] = (uint8_t *) calloc (self->rows, 1);
            assert (r->counts [e]);
        }
        r->n_epochs = n;
    }
    uint8_t *c = r->counts [lease->epoch];
    for (uint64_t p = lease->pos; p < lease->pos + lease->count; p++)
        if (c [p] < 255)
            c [p]++;
}

//  Every range applied every row of every completed epoch exactly once.
static void
s_check_rows (kd_history_check_t *self)
{
    s_range_t *ranges = (s_range_t *) calloc (S_MAX_RANGES, sizeof (s_range_t));
    assert (ranges);
    size_t n_ranges = 0, twice_listed = 0, unleased_listed = 0;
    qsort (self->applies, self->n_applies, sizeof (s_apply_t), s_by_time);
    for (size_t i = 0; i < self->n_applies; i++) {
        s_apply_t *a = &self->applies [i];
        s_range_t *r = s_range (ranges, &n_ranges, a->lo);
        if (!r)
            continue;
        r->any = true;
        char vkey [32];
        snprintf (vkey, sizeof vkey, "%llu", (unsigned long long) a->version);
        char *sig = s_signature (a);
        const char *seen = (const char *) zhashx_lookup (r->versions, vkey);
        if (seen) {
            //  Another replica (or a resend) applied this version: it must
            //  have applied the same gradients, and counts once.
            if (strcmp (seen, sig))
                s_fail (self, "range %llu: version %llu applied with different gradients on two "
                        "replicas (%s: %s against %s)", (unsigned long long) a->lo,
                        (unsigned long long) a->version, a->source, sig, seen);
            free (sig);
            continue;
        }
        zhashx_insert (r->versions, vkey, sig);
        for (size_t g = 0; g < a->n; g++) {
            const s_lease_t *lease = s_lease_of (self, a->ranks [g], a->clocks [g], a->t);
            if (!lease) {
                self->unleased++;
                if (unleased_listed++ < KD_CHECK_MAX_LISTED)
                    s_fail (self, "range %llu: version %llu applied rank %llu clock %llu, which no "
                            "lease names", (unsigned long long) a->lo, (unsigned long long) a->version,
                            (unsigned long long) a->ranks [g], (unsigned long long) a->clocks [g]);
                continue;
            }
            char gkey [96];
            snprintf (gkey, sizeof gkey, "%llu/%llu/%llu/%llu", (unsigned long long) a->ranks [g],
                      (unsigned long long) a->clocks [g], (unsigned long long) lease->epoch,
                      (unsigned long long) lease->pos);
            uintptr_t before = (uintptr_t) zhashx_lookup (r->grads, gkey);
            if (before) {
                self->grads_twice++;
                if (twice_listed++ < KD_CHECK_MAX_LISTED)
                    s_fail (self, "range %llu: gradient rank %llu clock %llu (epoch %llu, rows at "
                            "%llu..%llu) applied twice, at versions %llu and %llu",
                            (unsigned long long) a->lo, (unsigned long long) a->ranks [g],
                            (unsigned long long) a->clocks [g], (unsigned long long) lease->epoch,
                            (unsigned long long) lease->pos,
                            (unsigned long long) (lease->pos + lease->count),
                            (unsigned long long) (before - 1), (unsigned long long) a->version);
            }
            else
                zhashx_insert (r->grads, gkey, (void *) (uintptr_t) (a->version + 1));
            s_count_rows (self, r, lease);
        }
    }
    for (uint64_t k = 0; k < self->ranges && n_ranges < self->ranges; k++)
        if (k >= n_ranges)
            s_fail (self, "only %zu of %llu ranges applied anything", n_ranges,
                    (unsigned long long) self->ranges);
    //  A range's epochs: rows lost (in a completed epoch) and applied twice.
    for (size_t i = 0; i < n_ranges; i++) {
        s_range_t *r = &ranges [i];
        size_t needed = (size_t) self->epochs_completed;
        for (size_t e = 0; e < r->n_epochs || e < needed; e++) {
            uint64_t lost = 0, twice = 0, first_lost = 0, first_twice = 0;
            for (uint64_t p = 0; p < self->rows; p++) {
                uint8_t c = e < r->n_epochs ? r->counts [e][p] : 0;
                if (c == 0 && e < needed && !lost++)
                    first_lost = p;
                if (c > 1 && !twice)
                    first_twice = p;
                twice += c > 1 ? c - 1u : 0;
            }
            if (lost)
                s_fail (self, "range %llu epoch %zu: %llu rows lost (never applied; the first at "
                        "position %llu)", (unsigned long long) r->lo, e, (unsigned long long) lost,
                        (unsigned long long) first_lost);
            if (twice)
                s_fail (self, "range %llu epoch %zu: %llu rows applied twice (the first at position "
                        "%llu)", (unsigned long long) r->lo, e, (unsigned long long) twice,
                        (unsigned long long) first_twice);
            self->rows_lost += lost;
            self->rows_twice += twice;
        }
        for (size_t e = 0; e < r->n_epochs; e++)
            free (r->counts [e]);
        free (r->counts);
        zhashx_destroy (&r->versions);
        zhashx_destroy (&r->grads);
    }
    free (ranges);
}

//  The replicas of each range ended at one version with one CRC.
static void
s_check_finals (kd_history_check_t *self)
{
    for (size_t i = 0; i < self->n_finals; i++) {
        const s_final_t *f = &self->finals [i];
        bool first = true;
        for (size_t j = 0; j < i; j++)
            first = first && self->finals [j].lo != f->lo;
        if (!first)
            continue;
        uint64_t top = 0;
        size_t at_top = 0, total = 0;
        for (size_t j = i; j < self->n_finals; j++)
            if (self->finals [j].lo == f->lo && self->finals [j].version > top)
                top = self->finals [j].version;
        const s_final_t *ref = NULL;
        for (size_t j = i; j < self->n_finals; j++) {
            const s_final_t *g = &self->finals [j];
            if (g->lo != f->lo)
                continue;
            total++;
            if (g->version != top) {
                s_fail (self, "range %llu: %s ended at version %llu, its replica at %llu",
                        (unsigned long long) g->lo, g->source, (unsigned long long) g->version,
                        (unsigned long long) top);
                continue;
            }
            at_top++;
            if (!ref)
                ref = g;
            else
            if (strcmp (ref->crc, g->crc))
                s_fail (self, "range %llu: replicas differ at version %llu: %s params_crc %s, %s %s",
                        (unsigned long long) g->lo, (unsigned long long) top, ref->source, ref->crc,
                        g->source, g->crc);
        }
        if (self->replicas > 1 && at_top < 2)
            s_fail (self, "range %llu: %zu replica(s) reported a final params_crc; two are needed "
                    "to compare", (unsigned long long) f->lo, at_top);
        (void) total;
    }
    if (self->replicas > 1 && self->n_finals == 0 && self->started)
        s_fail (self, "no shard reported its final params_crc (did they stop cleanly?)");
}

//  A fault-kind's tally.
static s_kind_stat_t *
s_kind (kd_history_check_t *self, const char *kind)
{
    for (size_t i = 0; i < self->n_kinds; i++)
        if (!strcmp (self->kinds [i].kind, kind))
            return &self->kinds [i];
    if (self->n_kinds == KD_FAULT_KINDS + 1)
        return &self->kinds [KD_FAULT_KINDS];
    s_kind_stat_t *k = &self->kinds [self->n_kinds++];
    memset (k, 0, sizeof *k);
    snprintf (k->kind, sizeof k->kind, "%s", kind);
    return k;
}

//  After each fault the cluster committed again; its stall is the longest
//  gap between commits from the fault to a window after it.
static void
s_check_faults (kd_history_check_t *self)
{
    for (size_t i = 0; i < self->n_faults; i++) {
        s_fault_t *f = &self->faults [i];
        s_kind_stat_t *k = s_kind (self, f->kind);
        if (!f->fired) {
            s_fail (self, "fault %zu (%s %s) could not be fired: %s", i + 1, f->kind, f->target, f->note);
            continue;
        }
        k->injected++;
        uint64_t prev = f->t, stall = 0;
        bool after = false;
        for (size_t c = 0; c < self->n_commits; c++) {
            uint64_t t = self->commits [c];
            if (t <= f->t)
                continue;
            if (t - prev > stall)
                stall = t - prev;
            prev = t;
            if (t > f->t_end) {
                after = true;
                if (t > f->t_end + S_RECOVERY_WINDOW)
                    break;
            }
        }
        if (!after) {
            s_fail (self, "fault %zu (%s %s): no commit after it", i + 1, f->kind, f->target);
            continue;
        }
        k->survived++;
        if ((double) stall / 1000 > k->worst_ms)
            k->worst_ms = (double) stall / 1000;
    }
}

static int
s_by_process (const void *a, const void *b)
{
    const s_sample_t *x = (const s_sample_t *) a, *y = (const s_sample_t *) b;
    int c = strcmp (x->name, y->name);
    if (c)
        return c;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->t < y->t ? -1 : x->t > y->t;
}

static int
s_double_cmp (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

//  Median of n values taken with a stride from samples (field at offset).
static double
s_median (const s_sample_t *s, size_t n, size_t offset)
{
    double *v = (double *) malloc ((n + 1) * sizeof (double));
    assert (v);
    for (size_t i = 0; i < n; i++)
        v [i] = *(const double *) ((const char *) &s [i] + offset);
    qsort (v, n, sizeof (double), s_double_cmp);
    double m = n ? v [n / 2] : 0;
    free (v);
    return m;
}

//  Judge one figure of one process: the median of the last third of its
//  samples after warm-up against the median of the first third.
static void
s_judge (kd_history_check_t *self, const s_sample_t *s, size_t n, size_t offset, const char *what,
         double floor, double *worst, char *worst_who, size_t who_size)
{
    size_t third = n / 3;
    double first = s_median (s, third, offset), last = s_median (s + n - third, third, offset);
    double growth = first > 0 ? (last - first) / first : 0;
    if (growth > *worst) {
        *worst = growth;
        snprintf (worst_who, who_size, "%s pid %d", s->name, s->pid);
    }
    if (growth > KD_CHECK_GROWTH && last - first > floor)
        s_fail (self, "%s pid %d: %s grew %.1f%% after warm-up (%.0f to %.0f)", s->name, s->pid, what,
                100 * growth, first, last);
}

//  Descriptors and RSS of every service stay flat after warm-up.
static void
s_check_resources (kd_history_check_t *self)
{
    qsort (self->samples, self->n_samples, sizeof (s_sample_t), s_by_process);
    double warmup_us = 1e6 * (self->soak_s * 0.2 > KD_CHECK_WARMUP_S ? self->soak_s * 0.2 : KD_CHECK_WARMUP_S);
    for (size_t i = 0; i < self->n_samples; ) {
        size_t j = i;
        while (j < self->n_samples && !strcmp (self->samples [j].name, self->samples [i].name)
               && self->samples [j].pid == self->samples [i].pid)
            j++;
        //  Warm-up is counted from training's start or the process's own.
        uint64_t from = self->samples [i].t > self->t_start ? self->samples [i].t : self->t_start;
        size_t a = i;
        while (a < j && (double) (self->samples [a].t - from) < warmup_us)
            a++;
        size_t b = a;
        while (b < j && (!self->ended || self->samples [b].t < self->t_end))
            b++;
        if (b - a >= KD_CHECK_MIN_SAMPLES) {
            self->sampled++;
            s_judge (self, &self->samples [a], b - a, offsetof (s_sample_t, rss_kb), "RSS (KiB)",
                     KD_CHECK_RSS_FLOOR_KB, &self->growth_rss, self->growth_rss_who,
                     sizeof self->growth_rss_who);
            //  A promoted replica opens a connection to each peer once:
            //  a step, not a leak, so the floor is the cluster's size.
            s_judge (self, &self->samples [a], b - a, offsetof (s_sample_t, fds), "descriptors",
                     self->peers > KD_CHECK_FDS_FLOOR ? self->peers : KD_CHECK_FDS_FLOOR, &self->growth_fds, self->growth_fds_who,
                     sizeof self->growth_fds_who);
        }
        i = j;
    }
}

size_t
kd_history_check_run (kd_history_check_t *self)
{
    assert (self);
    //  Failures found while feeding (versions that went back, leftovers)
    //  stay; the rest is found again.
    self->rows_lost = self->rows_twice = self->grads_twice = self->unleased = 0;
    self->n_kinds = 0;
    if (self->malformed)
        s_fail (self, "%zu history lines are not JSON objects", self->malformed);
    if (!self->started)
        s_fail (self, "the scheduler's history has no start: training never began");
    else
    if (!self->ended)
        s_fail (self, "the scheduler's history has no end: the run did not finish");
    else
    if (strcmp (self->reason, "epochs") && strcmp (self->reason, "max-seconds")
    &&  strcmp (self->reason, "target-accuracy") && strcmp (self->reason, "accuracy"))
        s_fail (self, "the run ended on '%s', not on its target", self->reason);
    if (self->ended && self->epochs_completed == 0)
        s_fail (self, "the run completed no epoch");
    if (self->chaos && (!self->done || self->local_code != 0))
        s_fail (self, "kudus local %s", self->done ? "exited with an error" : "did not finish");
    if (self->started && self->rows > 0)
        s_check_rows (self);
    s_check_finals (self);
    s_check_faults (self);
    s_check_resources (self);
    return self->n_failures;
}

//  --------------------------------------------------------------------------
//  Results

size_t
kd_history_check_failures (kd_history_check_t *self)
{
    return self->n_failures;
}

const char *
kd_history_check_failure (kd_history_check_t *self, size_t index)
{
    return index < self->n_failures ? self->failures [index] : NULL;
}

uint64_t
kd_history_check_rows_lost (kd_history_check_t *self)
{
    return self->rows_lost;
}

uint64_t
kd_history_check_rows_twice (kd_history_check_t *self)
{
    return self->rows_twice;
}

uint64_t
kd_history_check_gradients_twice (kd_history_check_t *self)
{
    return self->grads_twice;
}

size_t
kd_history_check_faults (kd_history_check_t *self)
{
    size_t n = 0;
    for (size_t i = 0; i < self->n_kinds; i++)
        n += self->kinds [i].injected;
    return n;
}

size_t
kd_history_check_survived (kd_history_check_t *self)
{
    size_t n = 0;
    for (size_t i = 0; i < self->n_kinds; i++)
        n += self->kinds [i].survived;
    return n;
}

size_t
kd_history_check_restarts (kd_history_check_t *self)
{
    return self->restarts;
}

void
kd_history_check_print (kd_history_check_t *self, FILE *out)
{
    fprintf (out, "kudus chaos: faults injected %zu, survived %zu; rows lost %llu, rows applied twice %llu, "
             "gradients applied twice %llu; restarts %zu; epochs completed %llu (%s)\n",
             kd_history_check_faults (self), kd_history_check_survived (self),
             (unsigned long long) self->rows_lost, (unsigned long long) self->rows_twice,
             (unsigned long long) self->grads_twice, self->restarts,
             (unsigned long long) self->epochs_completed, self->ended ? self->reason : "not finished");
    if (self->n_kinds) {
        fprintf (out, "kudus chaos: longest stall after a fault, per kind:");
        for (size_t i = 0; i < self->n_kinds; i++)
            fprintf (out, " %s %.0f ms (%zu/%zu)", self->kinds [i].kind, self->kinds [i].worst_ms,
                     self->kinds [i].survived, self->kinds [i].injected);
        fputc ('\n', out);
    }
    fprintf (out, "kudus chaos: resources: %zu processes judged; largest growth after warm-up: "
             "RSS %+.1f%% (%s), descriptors %+.1f%% (%s)\n", self->sampled, 100 * self->growth_rss,
             *self->growth_rss_who ? self->growth_rss_who : "-", 100 * self->growth_fds,
             *self->growth_fds_who ? self->growth_fds_who : "-");
    if (self->n_failures == 0)
        fprintf (out, "kudus chaos: PASS\n");
    else {
        fprintf (out, "kudus chaos: FAIL, %zu failure(s):\n", self->n_failures);
        for (size_t i = 0; i < self->n_failures; i++)
            fprintf (out, "  - %s\n", self->failures [i]);
        if (self->rows_twice && (!strcmp (self->consistency, "asp") || !strcmp (self->consistency, "ssp")))
            fprintf (out, "kudus chaos: note: under ASP and SSP a worker that dies (or is declared dead) "
                     "after its pushes reached the shards but before its ARRIVE has its rows trained "
                     "twice: the exception docs/consistency.md states\n");
        if (*self->command)
            fprintf (out, "kudus chaos: reproduce with: %s\n", self->command);
    }
}

//  A JSON string.
static void
s_json_str (FILE *out, const char *s)
{
    fputc ('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char) *s;
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

void
kd_history_check_write_json (kd_history_check_t *self, FILE *out)
{
    fprintf (out, "{\"pass\": %s, \"faults\": %zu, \"survived\": %zu, \"rows_lost\": %llu, "
             "\"rows_twice\": %llu, \"gradients_twice\": %llu, \"restarts\": %zu, "
             "\"epochs_completed\": %llu, \"stop_reason\": ",
             self->n_failures ? "false" : "true", kd_history_check_faults (self),
             kd_history_check_survived (self), (unsigned long long) self->rows_lost,
             (unsigned long long) self->rows_twice, (unsigned long long) self->grads_twice,
             self->restarts, (unsigned long long) self->epochs_completed);
    s_json_str (out, self->reason);
    fprintf (out, ", \"worst_stall_ms\": {");
    for (size_t i = 0; i < self->n_kinds; i++)
        fprintf (out, "%s\"%s\": %.0f", i ? ", " : "", self->kinds [i].kind, self->kinds [i].worst_ms);
    fprintf (out, "}, \"growth\": {\"rss\": %.4f, \"fds\": %.4f}, \"failures\": [",
             self->growth_rss, self->growth_fds);
    for (size_t i = 0; i < self->n_failures; i++) {
        fputs (i ? ", " : "", out);
        s_json_str (out, self->failures [i]);
    }
    fputs ("], \"reproduce\": ", out);
    s_json_str (out, self->command);
    fputs ("}\n", out);
}
