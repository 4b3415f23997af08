/*  kd_optimizer: the update rule a shard applies to its key range.

    Each rule is written as torch.optim 1.13 writes its single-tensor path:
    the same float32 operations in the same order, with Python's double
    scalars (bias corrections, step size) computed in double and rounded to
    float where torch hands them to a float kernel.
*/
#include "kd_optimizer.h"
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _kd_optimizer_t {
    kd_optimizer_opts_t opts;           //  configuration
    size_t n;                           //  keys
    uint64_t t;                         //  steps taken
    uint64_t samples;                   //  samples applied before the next step
    size_t n_state;                     //  state buffers in use
    float *block;                       //  n_state * n floats of state
    float *state [KD_OPTIMIZER_MAX_STATE];  //  each buffer, in block
};

static const struct {
    const char *name;
    kd_opt_kind_t kind;
} s_kinds [] = {
    { "sgd", KD_OPT_SGD }, { "momentum", KD_OPT_SGD }, { "nesterov", KD_OPT_NESTEROV },
    { "adagrad", KD_OPT_ADAGRAD }, { "adam", KD_OPT_ADAM }, { "adamw", KD_OPT_ADAMW },
    { "ftrl", KD_OPT_FTRL }
};

int
kd_optimizer_kind_parse (const char *name)
{
    for (size_t i = 0; name && i < sizeof s_kinds / sizeof s_kinds [0]; i++)
        if (!strcmp (name, s_kinds [i].name))
            return (int) s_kinds [i].kind;
    return -1;
}

const char *
kd_optimizer_kind_name (kd_opt_kind_t kind)
{
    switch (kind) {
        case KD_OPT_SGD:      return "sgd";
        case KD_OPT_NESTEROV: return "nesterov";
        case KD_OPT_ADAGRAD:  return "adagrad";
        case KD_OPT_ADAM:     return "adam";
        case KD_OPT_ADAMW:    return "adamw";
        case KD_OPT_FTRL:     return "ftrl";
    }
    return "unknown";
}

kd_optimizer_opts_t
kd_optimizer_defaults (kd_opt_kind_t kind)
{
    kd_optimizer_opts_t o = {
        .kind = kind, .lr = 0.001, .momentum = 0, .beta1 = 0.9, .beta2 = 0.999,
        .eps = 1e-8, .weight_decay = 0, .schedule = KD_SCHED_CONSTANT,
        .step_every = 1, .gamma = 1, .cosine_steps = 1, .warmup = 0,
        .l1 = 0, .l2 = 0, .ftrl_beta = 1
    };
    if (kind == KD_OPT_SGD || kind == KD_OPT_NESTEROV)
        o.lr = 0.01;
    if (kind == KD_OPT_NESTEROV)
        o.momentum = 0.9;
    if (kind == KD_OPT_ADAGRAD) {
        o.lr = 0.01;
        o.eps = 1e-10;
    }
    if (kind == KD_OPT_ADAMW)
        o.weight_decay = 0.01;
    if (kind == KD_OPT_FTRL)
        o.lr = 0.1;
    return o;
}

//  Parse a whole string as a finite double.
static int
s_double (const char *text, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod (text, &end);
    if (!*text || *end || errno || !isfinite (v))
        return -1;
    *out = v;
    return 0;
}

//  Parse a whole string as an unsigned integer.
static int
s_uint (const char *text, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    if (!*text || *text == '-')
        return -1;
    unsigned long long v = strtoull (text, &end, 10);
    if (*end || errno)
        return -1;
    *out = v;
    return 0;
}

int
kd_optimizer_schedule_parse (const char *text, kd_optimizer_opts_t *opts,
                             char *err, size_t err_size)
{
    assert (opts);
    char buf [64];
    if (!text || strlen (text) >= sizeof buf) {
        snprintf (err, err_size, "schedule: expected constant, step:EVERY:GAMMA or cosine:STEPS");
        return -1;
    }
    snprintf (buf, sizeof buf, "%s", text);
    char *colon = strchr (buf, ':');
    if (colon)
        *colon++ = 0;
    if (!strcmp (buf, "constant") && !colon) {
        opts->schedule = KD_SCHED_CONSTANT;
        return 0;
    }
    if (!strcmp (buf, "step") && colon) {
        char *second = strchr (colon, ':');
        uint64_t every;
        double gamma;
        if (second) {
            *second++ = 0;
            if (s_uint (colon, &every) == 0 && every > 0 && s_double (second, &gamma) == 0
            &&  gamma > 0 && gamma <= 1) {
                opts->schedule = KD_SCHED_STEP;
                opts->step_every = every;
                opts->gamma = gamma;
                return 0;
            }
        }
        snprintf (err, err_size, "schedule '%s': step:EVERY:GAMMA needs EVERY >= 1, 0 < GAMMA <= 1", text);
        return -1;
    }
    if (!strcmp (buf, "cosine") && colon) {
        uint64_t steps;
        if (s_uint (colon, &steps) == 0 && steps > 0) {
            opts->schedule = KD_SCHED_COSINE;
            opts->cosine_steps = steps;
            return 0;
        }
        snprintf (err, err_size, "schedule '%s': cosine:STEPS needs STEPS >= 1", text);
        return -1;
    }
    snprintf (err, err_size, "schedule '%s': expected constant, step:EVERY:GAMMA or cosine:STEPS", text);
    return -1;
}

int
kd_optimizer_opts_check (const kd_optimizer_opts_t *o, char *err, size_t err_size)
{
    assert (o);
    const char *bad = NULL;
    if (o->kind < KD_OPT_SGD || o->kind > KD_OPT_FTRL)
        bad = "unknown optimizer";
    else
    if (!(o->lr > 0 && o->lr <= 100))
        bad = "lr must be in (0, 100]";
    else
    if (!(o->momentum >= 0 && o->momentum < 1))
        bad = "momentum must be in [0, 1)";
    else
    if (o->kind == KD_OPT_NESTEROV && o->momentum == 0)
        bad = "nesterov needs momentum > 0";
    else
    if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
        bad = "beta1 and beta2 must be in [0, 1)";
    else
    if (!(o->eps > 0 && o->eps <= 1))
        bad = "eps must be in (0, 1]";
    else
    if (!(o->weight_decay >= 0 && o->weight_decay <= 1))
        bad = "weight decay must be in [0, 1]";
    else
    if (o->schedule < KD_SCHED_CONSTANT || o->schedule > KD_SCHED_COSINE
    ||  o->step_every == 0 || !(o->gamma > 0 && o->gamma <= 1) || o->cosine_steps == 0)
        bad = "bad learning-rate schedule";
    else
    if (o->warmup > 100000000)
        bad = "warm-up must be at most 1e8 steps";
    else
    if (!(o->l1 >= 0 && o->l1 <= 1e6) || !(o->l2 >= 0 && o->l2 <= 1e6)
    ||  !(o->ftrl_beta > 0 && o->ftrl_beta <= 1e6))
        bad = "l1 and l2 must be in [0, 1e6] and ftrl's beta in (0, 1e6]";
    else
    if (o->kind == KD_OPT_FTRL && o->weight_decay != 0)
        bad = "ftrl takes l2, not weight decay";
    if (bad) {
        snprintf (err, err_size, "optimizer: %s", bad);
        return -1;
    }
    return 0;
}

//  The shortest of %.15g, %.16g and %.17g that reads back as v exactly.
static const char *
s_exact (double v, char *buf, size_t size)
{
    for (int digits = 15; digits <= 17; digits++) {
        snprintf (buf, size, "%.*g", digits, v);
        if (strtod (buf, NULL) == v)
            break;
    }
    return buf;
}

int
kd_optimizer_format (const kd_optimizer_opts_t *o, char *out, size_t out_size)
{
    assert (o && out);
    char sched [64], b [7][32];
    if (o->schedule == KD_SCHED_STEP)
        snprintf (sched, sizeof sched, "step:%llu:%s", (unsigned long long) o->step_every,
                  s_exact (o->gamma, b [6], sizeof b [6]));
    else
    if (o->schedule == KD_SCHED_COSINE)
        snprintf (sched, sizeof sched, "cosine:%llu", (unsigned long long) o->cosine_steps);
    else
        snprintf (sched, sizeof sched, "constant");
    int n = snprintf (out, out_size,
                      "%s lr=%s momentum=%s beta1=%s beta2=%s eps=%s wd=%s schedule=%s warmup=%llu",
                      kd_optimizer_kind_name (o->kind), s_exact (o->lr, b [0], sizeof b [0]),
                      s_exact (o->momentum, b [1], sizeof b [1]), s_exact (o->beta1, b [2], sizeof b [2]),
                      s_exact (o->beta2, b [3], sizeof b [3]), s_exact (o->eps, b [4], sizeof b [4]),
                      s_exact (o->weight_decay, b [5], sizeof b [5]), sched,
                      (unsigned long long) o->warmup);
    //  Named only when not the default, so that step-counted specs read
    //  as they always did.
    if (n >= 0 && (size_t) n < out_size && o->per_sample)
        n += snprintf (out + n, out_size - (size_t) n, " unit=samples");
    if (n >= 0 && (size_t) n < out_size && o->kind == KD_OPT_FTRL)
        n += snprintf (out + n, out_size - (size_t) n, " l1=%s l2=%s beta=%s",
                       s_exact (o->l1, b [0], sizeof b [0]), s_exact (o->l2, b [1], sizeof b [1]),
                       s_exact (o->ftrl_beta, b [2], sizeof b [2]));
    return n < 0 || (size_t) n >= out_size ? -1 : 0;
}

int
kd_optimizer_parse (const char *spec, kd_optimizer_opts_t *opts, char *err, size_t err_size)
{
    assert (opts);
    char buf [KD_OPTIMIZER_SPEC_MAX];
    if (!spec || strlen (spec) >= sizeof buf) {
        snprintf (err, err_size, "optimizer spec missing or longer than %d bytes",
                  KD_OPTIMIZER_SPEC_MAX - 1);
        return -2;
    }
    snprintf (buf, sizeof buf, "%s", spec);
    char *save = NULL;
    char *word = strtok_r (buf, " ", &save);
    int kind = word ? kd_optimizer_kind_parse (word) : -1;
    if (kind < 0) {
        snprintf (err, err_size, "optimizer spec '%s': unknown rule", spec);
        return -2;
    }
    kd_optimizer_opts_t o = kd_optimizer_defaults ((kd_opt_kind_t) kind);
    while ((word = strtok_r (NULL, " ", &save))) {
        char *eq = strchr (word, '=');
        if (!eq) {
            snprintf (err, err_size, "optimizer spec: '%s' is not NAME=VALUE", word);
            return -2;
        }
        *eq++ = 0;
        double *field = !strcmp (word, "lr") ? &o.lr : !strcmp (word, "momentum") ? &o.momentum
                      : !strcmp (word, "beta1") ? &o.beta1 : !strcmp (word, "beta2") ? &o.beta2
                      : !strcmp (word, "eps") ? &o.eps : !strcmp (word, "wd") ? &o.weight_decay
                      : !strcmp (word, "l1") ? &o.l1 : !strcmp (word, "l2") ? &o.l2
                      : !strcmp (word, "beta") ? &o.ftrl_beta : NULL;
        int rc = 0;
        if (field)
            rc = s_double (eq, field);
        else
        if (!strcmp (word, "warmup"))
            rc = s_uint (eq, &o.warmup);
        else
        if (!strcmp (word, "unit")) {
            rc = !strcmp (eq, "samples") ? (o.per_sample = true, 0)
               : !strcmp (eq, "steps")   ? (o.per_sample = false, 0) : -1;
        }
        else
        if (!strcmp (word, "schedule"))
            rc = kd_optimizer_schedule_parse (eq, &o, err, err_size);
        else {
            snprintf (err, err_size, "optimizer spec: unknown field '%s'", word);
            return -2;
        }
        if (rc) {
            snprintf (err, err_size, "optimizer spec: bad value '%s' for %s", eq, word);
            return -2;
        }
    }
    if (kd_optimizer_opts_check (&o, err, err_size))
        return -2;
    *opts = o;
    return 0;
}

double
kd_optimizer_lr_at (const kd_optimizer_opts_t *o, uint64_t t)
{
    assert (o);
    if (t == 0)
        t = 1;
    double lr = o->lr;
    if (o->schedule == KD_SCHED_STEP)
        lr *= pow (o->gamma, (double) ((t - 1) / o->step_every));
    else
    if (o->schedule == KD_SCHED_COSINE) {
        double done = (double) (t - 1 < o->cosine_steps ? t - 1 : o->cosine_steps);
        lr *= (1 + cos (M_PI * done / (double) o->cosine_steps)) / 2;
    }
    if (o->warmup > 0 && t <= o->warmup)
        lr *= (double) t / (double) o->warmup;
    return lr;
}

size_t
kd_optimizer_state_count_of (const kd_optimizer_opts_t *opts)
{
    assert (opts);
    switch (opts->kind) {
        case KD_OPT_SGD:      return opts->momentum > 0 ? 1 : 0;
        case KD_OPT_NESTEROV: return 1;
        case KD_OPT_ADAGRAD:  return 1;
        case KD_OPT_ADAM:
        case KD_OPT_ADAMW:
        case KD_OPT_FTRL:     return 2;
    }
    return 0;
}

kd_optimizer_t *
kd_optimizer_new (const kd_optimizer_opts_t *opts, size_t n)
{
    char err [128];
    if (!opts || n == 0 || kd_optimizer_opts_check (opts, err, sizeof err))
        return NULL;
    kd_optimizer_t *self = (kd_optimizer_t *) calloc (1, sizeof *self);
    assert (self);
    self->opts = *opts;
    self->n = n;
    self->n_state = kd_optimizer_state_count_of (opts);
    if (self->n_state > 0) {
        self->block = (float *) calloc (self->n_state * n, sizeof (float));
        assert (self->block);
    }
    for (size_t i = 0; i < self->n_state; i++)
        self->state [i] = self->block + i * n;
    return self;
}

void
kd_optimizer_destroy (kd_optimizer_t **self_p)
{
    assert (self_p);
    kd_optimizer_t *self = *self_p;
    if (!self)
        return;
    free (self->block);
    free (self);
    *self_p = NULL;
}

//  torch's CPU kernels fuse a * b + c into one FMA wherever they add with
//  an alpha (add_, addcmul_), and round a scalar product first elsewhere;
//  fmaf and plain expressions (no contraction: -ffp-contract=off) mirror
//  that.  Each loop is cloned for CPUs with FMA, where fmaf is one
//  instruction, and without, where libm computes it exactly.
#define S_CLONES __attribute__ ((target_clones ("fma", "default")))

//  SGD, with momentum or Nesterov momentum (torch.optim.SGD, dampening 0).
S_CLONES static void
s_sgd (kd_optimizer_t *self, float *x, const float *g, float lr)
{
    const kd_optimizer_opts_t *o = &self->opts;
    float wd = (float) o->weight_decay, mu = (float) o->momentum;
    float *b = self->state [0];
    bool nesterov = o->kind == KD_OPT_NESTEROV;
    for (size_t i = 0; i < self->n; i++) {
        float d = wd != 0 ? fmaf (x [i], wd, g [i]) : g [i];
        if (b) {
            //  b starts at 0, so the first step gives b = d, as torch's
            //  clone of the first gradient does.
            b [i] = fmaf (d, 1.0f, b [i] * mu);
            d = nesterov ? fmaf (b [i], mu, d) : b [i];
        }
        x [i] = fmaf (d, -lr, x [i]);
    }
}

//  AdaGrad (torch.optim.Adagrad, lr_decay 0, initial accumulator 0).
S_CLONES static void
s_adagrad (kd_optimizer_t *self, float *x, const float *g, float lr)
{
    float wd = (float) self->opts.weight_decay, eps = (float) self->opts.eps;
    float *s = self->state [0];
    for (size_t i = 0; i < self->n; i++) {
        float d = wd != 0 ? fmaf (x [i], wd, g [i]) : g [i];
        s [i] = fmaf (d, d, s [i]);
        float std = sqrtf (s [i]) + eps;
        x [i] = x [i] + (-lr * d) / std;
    }
}

//  Adam and AdamW (torch.optim.Adam / AdamW, amsgrad off).
S_CLONES static void
s_adam (kd_optimizer_t *self, float *x, const float *g, double lr)
{
    const kd_optimizer_opts_t *o = &self->opts;
    bool decoupled = o->kind == KD_OPT_ADAMW;
    float wd = (float) o->weight_decay;
    float b1 = (float) o->beta1, b2 = (float) o->beta2;
    float one_b1 = (float) (1 - o->beta1), one_b2 = (float) (1 - o->beta2);
    double t = (double) self->t;
    double bc1 = 1 - pow (o->beta1, t), bc2 = 1 - pow (o->beta2, t);
    float step_size = (float) (lr / bc1);
    float bc2_sqrt = (float) sqrt (bc2);
    float eps = (float) o->eps;
    float shrink = (float) (1 - lr * o->weight_decay);
    float *m = self->state [0], *v = self->state [1];
    for (size_t i = 0; i < self->n; i++) {
        float d = g [i];
        if (decoupled)
            x [i] = x [i] * shrink;
        else
        if (wd != 0)
            d = fmaf (x [i], wd, d);
        m [i] = fmaf (d, one_b1, m [i] * b1);
        v [i] = fmaf (one_b2 * d, d, v [i] * b2);
        float denom = sqrtf (v [i]) / bc2_sqrt + eps;
        x [i] = x [i] + (-step_size * m [i]) / denom;
    }
}

//  FTRL-Proximal; state 0 is z, state 1 is n.  In double: n grows, and
//  sqrt (n + g g) - sqrt (n) loses its digits in float.
static void
s_ftrl (kd_optimizer_t *self, float *x, const float *g, double alpha)
{
    const kd_optimizer_opts_t *o = &self->opts;
    float *z = self->state [0], *n = self->state [1];
    for (size_t i = 0; i < self->n; i++) {
        double gi = g [i], ni = n [i], zi = z [i];
        double n_new = ni + gi * gi;
        double sigma = (sqrt (n_new) - sqrt (ni)) / alpha;
        zi += gi - sigma * x [i];
        z [i] = (float) zi;
        n [i] = (float) n_new;
        //  x from the stored z and n, so that it is a function of the
        //  state alone: a zero gradient then changes nothing, and a key's
        //  value is the same however often it is recomputed.
        zi = z [i];
        n_new = n [i];
        x [i] = fabs (zi) <= o->l1 ? 0.0f
              : (float) (-(zi - copysign (o->l1, zi)) / ((o->ftrl_beta + sqrt (n_new)) / alpha + o->l2));
    }
}

//  The rule's step on self's keys, with self's state and step count.
static void
s_dispatch (kd_optimizer_t *self, float *params, const float *g)
{
    double lr = kd_optimizer_lr_at (&self->opts, self->opts.per_sample ? self->samples + 1 : self->t);
    switch (self->opts.kind) {
        case KD_OPT_SGD:
        case KD_OPT_NESTEROV: s_sgd (self, params, g, (float) lr); break;
        case KD_OPT_ADAGRAD:  s_adagrad (self, params, g, (float) lr); break;
        case KD_OPT_ADAM:
        case KD_OPT_ADAMW:    s_adam (self, params, g, lr); break;
        case KD_OPT_FTRL:     s_ftrl (self, params, g, lr); break;
    }
}

void
kd_optimizer_step (kd_optimizer_t *self, float *params, const float *g)
{
    assert (self && params && g);
    self->t++;
    s_dispatch (self, params, g);
}

void
kd_optimizer_apply (const kd_optimizer_opts_t *opts, uint64_t t, uint64_t samples, float *params,
                    float *const *state, const float *g, size_t n)
{
    assert (opts && params && g);
    //  A view of the caller's keys: nothing is allocated.
    kd_optimizer_t view = { .opts = *opts, .n = n, .t = t ? t : 1, .samples = samples,
                            .n_state = kd_optimizer_state_count_of (opts) };
    for (size_t i = 0; i < view.n_state; i++)
        view.state [i] = state [i];
    s_dispatch (&view, params, g);
}

void
kd_optimizer_set_samples (kd_optimizer_t *self, uint64_t samples)
{
    assert (self);
    self->samples = samples;
}

uint64_t
kd_optimizer_steps (kd_optimizer_t *self)
{
    assert (self);
    return self->t;
}

const kd_optimizer_opts_t *
kd_optimizer_opts (kd_optimizer_t *self)
{
    assert (self);
    return &self->opts;
}

size_t
kd_optimizer_state_count (kd_optimizer_t *self)
{
    assert (self);
    return self->n_state;
}

float *
kd_optimizer_state (kd_optimizer_t *self)
{
    assert (self);
    return self->block;
}

void
kd_optimizer_set_steps (kd_optimizer_t *self, uint64_t steps)
{
    assert (self);
    self->t = steps;
}
