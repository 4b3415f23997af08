/*  kd_train_sim: the consistency controller in the loop of a real training
    run, on simulated time.

        kd_train_sim [--model M] [--workers N] [--slow K] [--factor F]
                     [--seed S] [--lr LR] [--momentum MU] [--seconds T]
                     [--iter-ms MS] [--link-ms MS] [--jitter SIGMA]
                     [--group-step each|fastest] [--what-if LETTERS]
                     [--eval-rows R] [--data DIR] [--spread K|auto]
                     [--hiccup P] [--hiccup-x X]

    A bench tool, not a test: it prints figures and never passes or fails.
    kd_controller makes every decision (which gradients a commit applies,
    with what weight, who is released when, with which lease), fed by
    workers whose iteration times are scripted: K of N take F times the
    compute of the others, with a seeded log-normal jitter (the scenario
    `noisy`, noise:0.6, is --slow 0 --jitter 0.6), and, with --hiccup P,
    each iteration with probability P takes X times as long (a worker
    descheduled on a loaded machine).  Each worker
    computes its gradient with kd_model_gradient on the parameters of the
    version it was released on and the rows of its lease, and each COMMIT
    is one kd_optimizer_step of the weighted sum, as a shard applies it.
    What it leaves out is the machine: no messages, no pulls, no OS
    scheduler, so it tells what the rules do to learning, apart from the
    timing noise of a real cluster (docs/experiments.md).

    --spread is the adaptive barrier's spread allowance, a number or auto
    (docs/consistency.md); the figures add how often the allowance
    changed and the phases the fast and the slow workers held only
    through their spread windows.

    The test accuracy of the full parameters is evaluated every 200 ms of
    simulated time; the times to 0.85 and 0.86 are those of the 1 s rolling
    mean, as `kudus experiment` measures them.

    --what-if changes what the tool applies, not what the controller
    decides, to ask which part of a rule costs what (ALSP with two groups,
    the fast one of the workers at factor 1):
      A  every group's commit a full step (each weight / share);
      B  no staleness discount on the fast workers' gradients;
      C  the fast group's commits a full step, the slow group's as decided;
      R  a slow group's commit takes no step: its weighted sum waits for
         the next fast step (what --group-step fastest decides), and the
         fast gradients are not discounted for the slow commits between.
*/
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kd_controller.h"
#include "kd_dataset.h"
#include "kd_model.h"
#include "kd_optimizer.h"

#define S_MAX_WORKERS   64
#define S_SLOTS         4           //  staged gradients a rank may hold
#define S_EVAL_MS       200
#define S_ROLL          5           //  evaluations in the 1 s rolling mean

typedef struct {
    bool used;                      //  slot holds a gradient
    uint64_t clock;                 //  its clock
    float *grad;                    //  the gradient
} s_slot_t;

typedef struct {
    bool computing;                 //  released, not arrived yet
    uint64_t clock;                 //  clock it computes
    uint64_t base;                  //  version it computes on
    uint32_t samples;               //  its lease's rows
    uint64_t t_arrive;              //  ms of its arrival
    double factor;                  //  its speed factor
    uint32_t group;                 //  last group it was released into
    s_slot_t slots [S_SLOTS];       //  staged gradients
} s_worker_t;

//  A uniform in (0, 1) from a 64-bit state (splitmix64).
static double
s_uniform (uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return ((double) (z >> 11) + 0.5) / 9007199254740992.0;
}

//  A standard normal (Box-Muller).
static double
s_normal (uint64_t *state)
{
    double u = s_uniform (state), v = s_uniform (state);
    return sqrt (-2 * log (u)) * cos (2 * M_PI * v);
}

//  The slot of (rank, clock), or NULL.
static s_slot_t *
s_find (s_worker_t *worker, uint64_t clock)
{
    for (int i = 0; i < S_SLOTS; i++)
        if (worker->slots [i].used && worker->slots [i].clock == clock)
            return &worker->slots [i];
    return NULL;
}

int
main (int argc, char **argv)
{
    const char *model_name = "alsp", *data = "/usr/share/datasets/fashion-mnist";
    const char *group_step = NULL, *what_if = "", *spread = "0";
    uint32_t n = 16, slow = 2, eval_rows = 10000;
    double factor = 4, lr = 0.1, momentum = 0.9, seconds = 60;
    double iter_ms = 40, link_ms = 8, jitter = 0.05, hiccup = 0, hiccup_x = 3;
    uint64_t seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv [i], *v = argv [i + 1];
        if (!strcmp (k, "--model")) model_name = v;
        else if (!strcmp (k, "--workers")) n = (uint32_t) atoi (v);
        else if (!strcmp (k, "--slow")) slow = (uint32_t) atoi (v);
        else if (!strcmp (k, "--factor")) factor = atof (v);
        else if (!strcmp (k, "--seed")) seed = (uint64_t) atoll (v);
        else if (!strcmp (k, "--lr")) lr = atof (v);
        else if (!strcmp (k, "--momentum")) momentum = atof (v);
        else if (!strcmp (k, "--seconds")) seconds = atof (v);
        else if (!strcmp (k, "--iter-ms")) iter_ms = atof (v);
        else if (!strcmp (k, "--link-ms")) link_ms = atof (v);
        else if (!strcmp (k, "--jitter")) jitter = atof (v);
        else if (!strcmp (k, "--group-step")) group_step = v;
        else if (!strcmp (k, "--what-if")) what_if = v;
        else if (!strcmp (k, "--eval-rows")) eval_rows = (uint32_t) atoi (v);
        else if (!strcmp (k, "--data")) data = v;
        else if (!strcmp (k, "--spread")) spread = v;
        else if (!strcmp (k, "--hiccup")) hiccup = atof (v);
        else if (!strcmp (k, "--hiccup-x")) hiccup_x = atof (v);
        else {
            fprintf (stderr, "kd_train_sim: unknown option %s\n", k);
            return 2;
        }
    }
    int model = kd_consistency_parse (model_name);
    if (model < 0 || n == 0 || n > S_MAX_WORKERS || slow > n) {
        fprintf (stderr, "kd_train_sim: bad model or worker counts\n");
        return 2;
    }
    char err [256];
    kd_dataset_t *train = kd_dataset_load_dir (data, "train", 0, 0, err, sizeof err);
    kd_dataset_t *test = kd_dataset_load_dir (data, "t10k", 0, eval_rows, err, sizeof err);
    if (!train || !test) {
        fprintf (stderr, "kd_train_sim: %s\n", err);
        return 1;
    }
    kd_controller_opts_t opts;
    kd_controller_opts_defaults (&opts, (kd_consistency_t) model);
    opts.rows = kd_dataset_count (train);
    opts.batch = 32;
    opts.seed = seed;
    opts.max_workers = n;
    if (group_step) {
        int rule = kd_group_step_parse (group_step);
        if (rule < 0) {
            fprintf (stderr, "kd_train_sim: bad --group-step %s\n", group_step);
            return 2;
        }
        opts.group_step = (kd_group_step_t) rule;
    }
    if (!strcmp (spread, "auto"))
        opts.spread_auto = true;
    else
        opts.spread = atof (spread);
    kd_controller_t *ctl = kd_controller_new (&opts);
    char spec [128];
    snprintf (spec, sizeof spec, "momentum lr=%g momentum=%g", lr, momentum);
    kd_optimizer_opts_t oopts;
    if (!ctl || kd_optimizer_parse (spec, &oopts, err, sizeof err)) {
        fprintf (stderr, "kd_train_sim: bad settings\n");
        return 2;
    }
    size_t np = kd_model_param_count (KD_MODEL_MLP, 128);
    kd_model_t *mlp = kd_model_new (KD_MODEL_MLP, 128, 32);
    kd_optimizer_t *opt = kd_optimizer_new (&oopts, np);
    float *params = malloc (np * sizeof (float)), *sum = malloc (np * sizeof (float));
    float *X = malloc (32 * KD_INPUT_DIM * sizeof (float));
    uint8_t y [32];
    uint32_t rows [32];
    kd_model_init_range (KD_MODEL_MLP, 128, seed, 0, np, params);

    //  The slow ranks are drawn from the seed, as a scenario's random:K.
    s_worker_t workers [S_MAX_WORKERS] = {{ 0 }};
    uint64_t rng = seed * 7919 + 17;
    for (uint32_t r = 0; r < n; r++)
        workers [r].factor = 1;
    for (uint32_t k = 0; k < slow; ) {
        uint32_t r = (uint32_t) (s_uniform (&rng) * n) % n;
        if (workers [r].factor == 1) {
            workers [r].factor = factor;
            k++;
        }
    }
    for (uint32_t r = 0; r < n; r++)
        for (int i = 0; i < S_SLOTS; i++)
            workers [r].slots [i].grad = malloc (np * sizeof (float));

    const float *images = kd_dataset_images (train);
    const uint8_t *labels = kd_dataset_labels (train);
    uint64_t now = 0, end = (uint64_t) (seconds * 1000), next_eval = 0;
    uint64_t applied = 0, commits = 0, fast_entries = 0, fast_stale = 0;
    double mass = 0, fast_mass = 0, slow_mass = 0;
    double roll [S_ROLL] = { 0 };
    float *pending = calloc (np, sizeof (float));
    int n_roll = 0;
    double hit [2] = { -1, -1 }, hit_samples [2] = { 0, 0 }, targets [2] = { 0.85, 0.86 };
    double acc_at [3] = { -1, -1, -1 };
    double allowance_at = -1;       //  s of the last allowance change
    uint64_t at_samples [3] = { 150000, 300000, 450000 };
    for (uint32_t r = 0; r < n; r++)
        kd_controller_join (ctl, r, now);
    while (now <= end) {
        const kd_decision_t *d;
        while ((d = kd_controller_next (ctl))) {
            if (d->type == KD_DEC_COMMIT && !d->direct) {
                if (d->n_entries > 0) {
                    memset (sum, 0, np * sizeof (float));
                    for (size_t i = 0; i < d->n_entries; i++) {
                        const kd_entry_t *e = &d->entries [i];
                        s_slot_t *slot = s_find (&workers [e->rank], e->clock);
                        if (!slot) {
                            fprintf (stderr, "kd_train_sim: commit names an unknown gradient\n");
                            return 1;
                        }
                        double wt = e->weight;
                        bool fast = workers [e->rank].factor == 1;
                        if (strchr (what_if, 'A') && model == KD_CONS_ALSP)
                            wt *= (double) n / (fast ? n - slow : slow);
                        if ((strchr (what_if, 'B') || strchr (what_if, 'R')) && fast)
                            wt *= 1.0 + (double) e->staleness;
                        if (strchr (what_if, 'C') && fast && model == KD_CONS_ALSP)
                            wt *= (double) n / (n - slow);
                        for (size_t j = 0; j < np; j++)
                            sum [j] += (float) wt * slot->grad [j];
                        slot->used = false;
                        applied += e->samples;
                        mass += wt;
                        if (workers [e->rank].factor == 1) {
                            fast_entries++;
                            fast_stale += e->staleness > 0;
                            fast_mass += wt;
                        }
                        else
                            slow_mass += wt;
                    }
                    bool fast_commit = workers [d->entries [0].rank].factor == 1;
                    if (strchr (what_if, 'R') && model == KD_CONS_ALSP && !fast_commit) {
                        //  Ride: a slow group's update waits for the next
                        //  fast commit instead of taking a step of its own.
                        for (size_t j = 0; j < np; j++)
                            pending [j] += sum [j];
                    }
                    else {
                        for (size_t j = 0; j < np; j++)
                            sum [j] += pending [j];
                        memset (pending, 0, np * sizeof (float));
                        kd_optimizer_step (opt, params, sum);
                    }
                    commits++;
                }
                for (size_t i = 0; i < d->n_drops; i++) {
                    s_slot_t *slot = s_find (&workers [d->drops [i].rank], d->drops [i].clock);
                    if (slot)
                        slot->used = false;
                }
            }
            else
            if (d->type == KD_DEC_ALLOWANCE)
                allowance_at = now / 1000.0;
            else
            if (d->type == KD_DEC_RELEASE) {
                s_worker_t *w = &workers [d->rank];
                s_slot_t *slot = NULL;
                for (int i = 0; i < S_SLOTS && !slot; i++)
                    if (!w->slots [i].used)
                        slot = &w->slots [i];
                if (!slot || d->lease.count == 0 || d->lease.count > 32) {
                    fprintf (stderr, "kd_train_sim: no slot or bad lease\n");
                    return 1;
                }
                kd_sampler_rows (kd_controller_sampler (ctl), d->lease, rows);
                for (uint32_t i = 0; i < d->lease.count; i++) {
                    memcpy (X + i * KD_INPUT_DIM, images + (size_t) rows [i] * KD_INPUT_DIM,
                            KD_INPUT_DIM * sizeof (float));
                    y [i] = labels [rows [i]];
                }
                //  The worker pulls the version it was released on now
                //  and computes on it; the gradient is staged at arrival.
                kd_model_gradient (mlp, params, X, y, d->lease.count, slot->grad);
                slot->used = true;
                slot->clock = d->clock;
                w->computing = true;
                w->clock = d->clock;
                w->base = d->version;
                w->samples = d->lease.count;
                w->group = d->group;
                double ms = iter_ms * w->factor * exp (jitter * s_normal (&rng));
                if (hiccup > 0 && s_uniform (&rng) < hiccup)
                    ms *= hiccup_x;
                ms += link_ms;
                w->t_arrive = now + (uint64_t) llround (ms < 1 ? 1 : ms);
            }
        }
        //  Next event: the earliest arrival, the controller's deadline or
        //  an evaluation.
        uint64_t next = next_eval;
        uint64_t deadline = kd_controller_deadline (ctl);
        if (deadline > now && deadline < next)
            next = deadline;
        for (uint32_t r = 0; r < n; r++)
            if (workers [r].computing && workers [r].t_arrive < next)
                next = workers [r].t_arrive;
        now = next > now ? next : now;
        if (now == next_eval) {
            double acc, loss;
            kd_model_evaluate (mlp, params, kd_dataset_images (test), kd_dataset_labels (test),
                               kd_dataset_count (test), &acc, &loss);
            roll [n_roll++ % S_ROLL] = acc;
            double mean = 0;
            int m = n_roll < S_ROLL ? n_roll : S_ROLL;
            for (int i = 0; i < m; i++)
                mean += roll [i] / m;
            for (int t = 0; t < 2; t++)
                if (hit [t] < 0 && n_roll >= S_ROLL && mean >= targets [t]) {
                    hit [t] = now / 1000.0;
                    hit_samples [t] = (double) applied;
                }
            for (int t = 0; t < 3; t++)
                if (acc_at [t] < 0 && applied >= at_samples [t])
                    acc_at [t] = mean;
            next_eval += S_EVAL_MS;
            if (hit [1] >= 0)
                break;
            continue;
        }
        bool arrived = false;
        for (uint32_t r = 0; r < n; r++) {
            s_worker_t *w = &workers [r];
            if (w->computing && w->t_arrive == now) {
                w->computing = false;
                kd_controller_arrive (ctl, r, w->clock, w->base, w->samples, now);
                arrived = true;
            }
        }
        if (!arrived)
            kd_controller_tick (ctl, now);
    }
    uint64_t holds [2] = { 0, 0 };
    for (uint32_t r = 0; r < n; r++)
        holds [workers [r].factor != 1] += kd_controller_spread_holds (ctl, r);
    printf ("model=%s step=%s what_if=%s slow=%u/%u x%g seed=%llu: t85=%.1f t86=%.1f samples85=%.0f "
            "samples86=%.0f acc@150k=%.4f acc@300k=%.4f acc@450k=%.4f commits=%llu "
            "per_s=%.1f applied=%llu mass/sample=%.5f fast_mass/entry=%.5f "
            "slow_mass=%.1f fast_stale=%.3f dropped=%llu regroups=%llu spread=%s "
            "allowance=%g allowance_changes=%llu allowance_at=%.2f early=%llu holds_fast=%llu holds_slow=%llu\n",
            model_name, group_step ? group_step : "each", *what_if ? what_if : "-", slow, n, factor,
            (unsigned long long) seed, hit [0], hit [1], hit_samples [0], hit_samples [1],
            acc_at [0], acc_at [1], acc_at [2], (unsigned long long) commits,
            commits / (now / 1000.0), (unsigned long long) applied,
            mass / (applied / 32.0), fast_entries ? fast_mass / fast_entries : 0, slow_mass,
            fast_entries ? (double) fast_stale / fast_entries : 0,
            (unsigned long long) kd_controller_dropped (ctl),
            (unsigned long long) kd_controller_regroups (ctl), spread,
            kd_controller_allowance (ctl),
            (unsigned long long) kd_controller_allowance_changes (ctl), allowance_at,
            (unsigned long long) kd_controller_early_releases (ctl),
            (unsigned long long) holds [0], (unsigned long long) holds [1]);
    for (uint32_t r = 0; r < n; r++)
        for (int i = 0; i < S_SLOTS; i++)
            free (workers [r].slots [i].grad);
    free (params);
    free (pending);
    free (sum);
    free (X);
    kd_optimizer_destroy (&opt);
    kd_model_destroy (&mlp);
    kd_controller_destroy (&ctl);
    kd_dataset_destroy (&train);
    kd_dataset_destroy (&test);
    return 0;
}
