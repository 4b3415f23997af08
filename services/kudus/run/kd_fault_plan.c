/*  kd_fault_plan: the seeded schedule of faults of `kudus chaos`.

    Each decision draws from its own splitmix64 stream keyed by the seed
    and the fault's index, so adding a kind to the list changes which
    kinds are drawn but not how the times fall.
*/
#include "kd_fault_plan.h"
#include "kd_util.h"
#include <assert.h>
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct _kd_fault_plan_t {
    uint64_t seed;              //  what drew it
    double seconds;             //  length of the soak
    double gap_s;               //  mean gap between faults
    int shards, replicas, workers;  //  the cluster's shape
    kd_fault_t *faults;         //  in time order (owned)
    size_t n;                   //  faults in use
};

static const char *s_kind_names [KD_FAULT_KINDS] = {
    "worker", "primary", "backup", "monitor", "pause", "flood", "partition", "slow"
};

const char *
kd_fault_kind_name (kd_fault_kind_t kind)
{
    return kind < KD_FAULT_KINDS ? s_kind_names [kind] : "?";
}

int
kd_fault_kind_parse (const char *name)
{
    for (int k = 0; k < KD_FAULT_KINDS; k++)
        if (!strcmp (name, s_kind_names [k]))
            return k;
    return -1;
}

bool
kd_fault_kind_lasts (kd_fault_kind_t kind)
{
    return kind == KD_FAULT_PAUSE || kind == KD_FAULT_PARTITION || kind == KD_FAULT_SLOW;
}

bool
kd_fault_kind_kills (kd_fault_kind_t kind)
{
    return kind == KD_FAULT_KILL_WORKER || kind == KD_FAULT_KILL_PRIMARY
        || kind == KD_FAULT_KILL_BACKUP || kind == KD_FAULT_KILL_MONITOR;
}

//  A draw in [0, n) from a stream.
static uint64_t
s_below (uint64_t *state, uint64_t n)
{
    return n ? kd_splitmix64 (state) % n : 0;
}

//  Kills of f's target already planned within the window before f.  A
//  range's primary and backup kills count together: either may land on
//  the same process.
static int
s_recent_kills (const kd_fault_t *faults, size_t n, const kd_fault_t *f)
{
    int kills = 0;
    for (size_t i = n; i-- > 0; ) {
        if (faults [i].at_ms + KD_FAULT_KILL_WINDOW_MS <= f->at_ms)
            break;
        kills += kd_fault_kind_kills (faults [i].kind) && !strcmp (faults [i].target, f->target);
    }
    return kills;
}

kd_fault_plan_t *
kd_fault_plan_new (uint64_t seed, double seconds, double gap_s, int shards, int replicas,
                   int workers, const char *kinds, char *err, size_t err_size)
{
    assert (shards > 0 && replicas > 0 && workers > 0 && gap_s > 0);
    int allowed [KD_FAULT_KINDS], n_allowed = 0;
    char *list = strdup (kinds), *save = NULL;
    assert (list);
    for (char *tok = strtok_r (list, ",", &save); tok; tok = strtok_r (NULL, ",", &save)) {
        int k = kd_fault_kind_parse (tok);
        if (k < 0) {
            snprintf (err, err_size, "setting 'faults': unknown kind '%s' (worker, primary, backup, "
                      "monitor, pause, flood, partition, slow)", tok);
            free (list);
            return NULL;
        }
        bool seen = false;
        for (int i = 0; i < n_allowed; i++)
            seen = seen || allowed [i] == k;
        if (!seen)
            allowed [n_allowed++] = k;
    }
    free (list);
    if (n_allowed == 0) {
        snprintf (err, err_size, "setting 'faults': no kind given");
        return NULL;
    }
    kd_fault_plan_t *self = (kd_fault_plan_t *) calloc (1, sizeof (kd_fault_plan_t));
    assert (self);
    *self = (kd_fault_plan_t) { .seed = seed, .seconds = seconds, .gap_s = gap_s,
                                .shards = shards, .replicas = replicas, .workers = workers };
    size_t cap = (size_t) (seconds / (gap_s / 2)) + 2;
    self->faults = (kd_fault_t *) calloc (cap, sizeof (kd_fault_t));
    assert (self->faults);
    uint64_t times = kd_mix64 (seed ^ 0x74696d6573ull);     //  "times"
    double at = KD_FAULT_WARMUP_MS;
    for (size_t i = 0; ; i++) {
        at += (gap_s * 0.5 + gap_s * (double) s_below (&times, 1000001) / 1e6) * 1000;
        if (at > seconds * 1000 || self->n == cap)
            break;
        uint64_t st = kd_mix64 (seed ^ kd_mix64 (i + 1));
        kd_fault_t *f = &self->faults [self->n++];
        f->at_ms = (uint64_t) at;
        f->kind = (kd_fault_kind_t) allowed [s_below (&st, (uint64_t) n_allowed)];
        int procs = shards * replicas;
        switch (f->kind) {
            case KD_FAULT_KILL_WORKER:
                snprintf (f->target, sizeof f->target, "worker-%d", (int) s_below (&st, (uint64_t) workers));
                break;
            case KD_FAULT_KILL_PRIMARY:
            case KD_FAULT_KILL_BACKUP:
                snprintf (f->target, sizeof f->target, "range-%d", (int) s_below (&st, (uint64_t) shards));
                break;
            case KD_FAULT_KILL_MONITOR:
                snprintf (f->target, sizeof f->target, "monitor");
                break;
            case KD_FAULT_PAUSE: {
                //  Any process but the scheduler (see kd_chaos.c).
                uint64_t who = s_below (&st, (uint64_t) (workers + procs + 1));
                if (who < (uint64_t) workers)
                    snprintf (f->target, sizeof f->target, "worker-%d", (int) who);
                else
                if (who < (uint64_t) (workers + procs))
                    snprintf (f->target, sizeof f->target, "shard-%d", (int) (who - (uint64_t) workers));
                else
                    snprintf (f->target, sizeof f->target, "monitor");
                f->duration_ms = KD_FAULT_PAUSE_MIN_MS
                               + (uint32_t) s_below (&st, KD_FAULT_PAUSE_MAX_MS - KD_FAULT_PAUSE_MIN_MS + 1);
                break;
            }
            case KD_FAULT_PARTITION:
            case KD_FAULT_SLOW: {
                //  A worker or a shard process: each has a namespace of
                //  its own under --netns.
                uint64_t who = s_below (&st, (uint64_t) (workers + procs));
                if (who < (uint64_t) workers)
                    snprintf (f->target, sizeof f->target, "worker-%d", (int) who);
                else
                    snprintf (f->target, sizeof f->target, "shard-%d", (int) (who - (uint64_t) workers));
                if (f->kind == KD_FAULT_PARTITION) {
                    f->duration_ms = KD_FAULT_PARTITION_MIN_MS
                                   + (uint32_t) s_below (&st, KD_FAULT_PARTITION_MAX_MS - KD_FAULT_PARTITION_MIN_MS + 1);
                    break;
                }
                f->duration_ms = KD_FAULT_SLOW_MIN_MS
                               + (uint32_t) s_below (&st, KD_FAULT_SLOW_MAX_MS - KD_FAULT_SLOW_MIN_MS + 1);
                double u = (double) s_below (&st, 1000001) / 1e6;
                f->rate_kbit = (uint32_t) (KD_FAULT_SLOW_MIN_KBIT
                                           * pow ((double) KD_FAULT_SLOW_MAX_KBIT / KD_FAULT_SLOW_MIN_KBIT, u));
                break;
            }
            case KD_FAULT_FLOOD: {
                uint64_t who = s_below (&st, (uint64_t) (procs + 2));
                if (who == 0)
                    snprintf (f->target, sizeof f->target, "scheduler");
                else
                if (who == 1)
                    snprintf (f->target, sizeof f->target, "monitor");
                else
                    snprintf (f->target, sizeof f->target, "shard-%d", (int) (who - 2));
                f->count = KD_FAULT_FLOOD_MIN
                         + (uint32_t) s_below (&st, KD_FAULT_FLOOD_MAX - KD_FAULT_FLOOD_MIN + 1);
                f->seed = kd_splitmix64 (&st);
                break;
            }
            default:
                assert (false);
        }
        if (kd_fault_kind_kills (f->kind)
        &&  s_recent_kills (self->faults, self->n - 1, f) >= KD_FAULT_KILLS_PER_WINDOW)
            self->n--;          //  a crash loop, not a fault: leave it out
    }
    return self;
}

void
kd_fault_plan_destroy (kd_fault_plan_t **self_p)
{
    assert (self_p);
    kd_fault_plan_t *self = *self_p;
    if (!self)
        return;
    free (self->faults);
    free (self);
    *self_p = NULL;
}

size_t
kd_fault_plan_size (kd_fault_plan_t *self)
{
    return self->n;
}

const kd_fault_t *
kd_fault_plan_at (kd_fault_plan_t *self, size_t index)
{
    return index < self->n ? &self->faults [index] : NULL;
}

void
kd_fault_plan_write_json (kd_fault_plan_t *self, FILE *out)
{
    fprintf (out, "{\n  \"seed\": %llu,\n  \"seconds\": %.17g,\n  \"fault_gap\": %.17g,\n"
             "  \"shards\": %d,\n  \"replicas\": %d,\n  \"workers\": %d,\n  \"faults\": [",
             (unsigned long long) self->seed, self->seconds, self->gap_s, self->shards,
             self->replicas, self->workers);
    for (size_t i = 0; i < self->n; i++) {
        const kd_fault_t *f = &self->faults [i];
        fprintf (out, "%s\n    {\"at_ms\": %llu, \"kind\": \"%s\", \"target\": \"%s\"", i ? "," : "",
                 (unsigned long long) f->at_ms, kd_fault_kind_name (f->kind), f->target);
        if (kd_fault_kind_lasts (f->kind))
            fprintf (out, ", \"duration_ms\": %u", f->duration_ms);
        if (f->kind == KD_FAULT_SLOW)
            fprintf (out, ", \"rate_kbit\": %u", f->rate_kbit);
        if (f->kind == KD_FAULT_FLOOD)
            fprintf (out, ", \"count\": %u, \"seed\": %llu", f->count, (unsigned long long) f->seed);
        fputc ('}', out);
    }
    fprintf (out, "\n  ]\n}\n");
}

void
kd_fault_plan_print (kd_fault_plan_t *self, FILE *out)
{
    for (size_t i = 0; i < self->n; i++) {
        const kd_fault_t *f = &self->faults [i];
        fprintf (out, "kudus chaos: fault %2zu at %7.1fs  %-8s %-10s", i + 1, (double) f->at_ms / 1000,
                 kd_fault_kind_name (f->kind), f->target);
        if (kd_fault_kind_lasts (f->kind))
            fprintf (out, " for %u ms", f->duration_ms);
        if (f->kind == KD_FAULT_SLOW)
            fprintf (out, " at %u kbit/s", f->rate_kbit);
        if (f->kind == KD_FAULT_FLOOD)
            fprintf (out, " %u messages", f->count);
        fputc ('\n', out);
    }
}
