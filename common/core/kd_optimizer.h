/*  kd_optimizer: the update rule a shard applies to its key range.

    A commit's gradients are first combined into one gradient g, the
    weighted sum of the consistency model (under ASP and SSP, one push);
    the optimizer then takes one step with g.  The rules follow
    torch.optim's (1.13) single-tensor implementations operation for
    operation in float32, so that the same gradient sequence gives the same
    parameters (tests/python/test_optimizer.py checks it to 1e-6):

      sgd       d = g + wd x;  b = mu b + d (b = d at step 1);
                x -= lr (nesterov ? d + mu b : b)     (mu = 0: x -= lr d)
      adagrad   d = g + wd x;  s += d d;  x -= lr d / (sqrt (s) + eps)
      adam      d = g + wd x;  m = b1 m + (1-b1) d;  v = b2 v + (1-b2) d d;
                x -= lr/(1-b1^t) m / (sqrt (v) / sqrt (1-b2^t) + eps)
      adamw     x *= 1 - lr wd, then adam with wd = 0
      ftrl      FTRL-Proximal (McMahan et al., KDD 2013), per key, alpha = lr:
                sigma = (sqrt (n + g g) - sqrt (n)) / alpha;  z += g - sigma x;
                n += g g;  x = |z| <= l1 ? 0
                             : -(z - sign (z) l1) / ((beta + sqrt (n)) / alpha + l2)
                (in double, stored in float32; x is a function of z and n, so
                a key's first step replaces its initial value, as for the
                zero-initialized linear models FTRL is meant for)

    The learning rate follows a schedule of the optimizer's step t (1, 2,
    ...): constant, step (times gamma every N steps) or cosine (from lr
    down to 0 over T steps), each after an optional linear warm-up from
    lr/W to lr over W steps.  With "unit=samples" the schedule's clock is
    the training samples applied before the step, plus one, instead of t:
    EVERY, STEPS and W then count samples, so that systems whose steps
    differ in size (LSP against BSP) decay after the same data.

    A spec string names a configuration, e.g.
        "adam lr=0.001 beta1=0.9 beta2=0.999 eps=1e-08 wd=0 schedule=constant warmup=0"
    kd_optimizer_format writes one and kd_optimizer_parse reads it: it is
    how the scheduler hands the run's optimizer to every shard.
*/
#ifndef KD_OPTIMIZER_H_INCLUDED
#define KD_OPTIMIZER_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KD_OPTIMIZER_MAX_STATE 2        //  state buffers per key at most
#define KD_OPTIMIZER_SPEC_MAX  256      //  longest spec string

typedef enum {
    KD_OPT_SGD = 1,                     //  SGD, with momentum when mu > 0
    KD_OPT_NESTEROV,                    //  SGD with Nesterov momentum
    KD_OPT_ADAGRAD,
    KD_OPT_ADAM,
    KD_OPT_ADAMW,
    KD_OPT_FTRL                         //  FTRL-Proximal
} kd_opt_kind_t;

typedef enum {
    KD_SCHED_CONSTANT = 1,
    KD_SCHED_STEP,                      //  lr * gamma^floor ((t-1) / every)
    KD_SCHED_COSINE                     //  lr * (1 + cos (pi min(t,T) / T)) / 2
} kd_sched_kind_t;

//  A configuration.  Fields a rule does not use are ignored.
typedef struct {
    kd_opt_kind_t kind;                 //  the rule
    double lr;                          //  base learning rate
    double momentum;                    //  sgd, nesterov: mu
    double beta1, beta2;                //  adam, adamw
    double eps;                         //  adagrad, adam, adamw
    double weight_decay;                //  every rule but ftrl (adamw: decoupled)
    double l1, l2;                      //  ftrl: L1 and L2 penalties
    double ftrl_beta;                   //  ftrl: beta of the per-key rate
    kd_sched_kind_t schedule;           //  learning-rate schedule
    uint64_t step_every;                //  step: steps between decays
    double gamma;                       //  step: decay factor
    uint64_t cosine_steps;              //  cosine: steps to reach 0
    uint64_t warmup;                    //  linear warm-up steps (0 = none)
    bool per_sample;                    //  schedule and warm-up count samples, not steps
} kd_optimizer_opts_t;

//  Defaults of a rule: torch.optim's (lr 0.001, except sgd's 0.01).
kd_optimizer_opts_t
    kd_optimizer_defaults (kd_opt_kind_t kind);

//  Parse a rule name ("sgd", "momentum" (= sgd), "nesterov", "adagrad",
//  "adam", "adamw", "ftrl"); -1 if unknown.
int
    kd_optimizer_kind_parse (const char *name);
const char *
    kd_optimizer_kind_name (kd_opt_kind_t kind);

//  Parse a schedule: "constant", "step:EVERY:GAMMA" or "cosine:STEPS".
//  Returns 0 and fills the schedule fields of opts, or -1 with a reason.
int
    kd_optimizer_schedule_parse (const char *text, kd_optimizer_opts_t *opts,
                                 char *err, size_t err_size);

//  Check a configuration: ranges of every field.  Returns 0 or -1 with a
//  reason in err.
int
    kd_optimizer_opts_check (const kd_optimizer_opts_t *opts, char *err, size_t err_size);

//  Write opts as a spec string (at most KD_OPTIMIZER_SPEC_MAX bytes with
//  the NUL).  Returns 0, or -1 if out is too small.
int
    kd_optimizer_format (const kd_optimizer_opts_t *opts, char *out, size_t out_size);

//  Read a spec string; every field not named keeps the rule's default.
//  Returns 0, or -2 on a malformed or out-of-range spec, with a reason.
int
    kd_optimizer_parse (const char *spec, kd_optimizer_opts_t *opts, char *err, size_t err_size);

typedef struct _kd_optimizer_t kd_optimizer_t;

//  An optimizer for n keys, its state zeroed.  NULL if opts fail the check
//  or n is 0.  Caller owns return value.
kd_optimizer_t *
    kd_optimizer_new (const kd_optimizer_opts_t *opts, size_t n);

//  Destroy and null the caller's pointer.
void
    kd_optimizer_destroy (kd_optimizer_t **self_p);

//  One step: update params [n] with the gradient g [n].
void
    kd_optimizer_step (kd_optimizer_t *self, float *params, const float *g);

//  Training samples applied before the next step: the schedule's clock
//  under "unit=samples" (ignored otherwise).
void
    kd_optimizer_set_samples (kd_optimizer_t *self, uint64_t samples);

//  State buffers a rule keeps per key (0 to KD_OPTIMIZER_MAX_STATE).
size_t
    kd_optimizer_state_count_of (const kd_optimizer_opts_t *opts);

//  One step t (1-based) of the rule on n keys whose state the caller
//  holds, state [i] being n floats for each of the rule's buffers: what
//  kd_optimizer_step does, for keys that do not sit in one array (a sparse
//  tensor's rows).  samples is the schedule's clock under "unit=samples",
//  as kd_optimizer_set_samples.
void
    kd_optimizer_apply (const kd_optimizer_opts_t *opts, uint64_t t, uint64_t samples, float *params,
                        float *const *state, const float *g, size_t n);

//  Learning rate at position t (1-based) of the schedule's clock: the step,
//  or under "unit=samples" the samples applied before it plus one.
double
    kd_optimizer_lr_at (const kd_optimizer_opts_t *opts, uint64_t t);

//  Steps taken so far.
uint64_t
    kd_optimizer_steps (kd_optimizer_t *self);

//  The configuration.
const kd_optimizer_opts_t *
    kd_optimizer_opts (kd_optimizer_t *self);

//  State buffers of the rule (0 for plain SGD, 1 for momentum, nesterov
//  and adagrad, 2 for adam and adamw), and all of them as one block of
//  count * n floats, buffer i at i * n: borrowed, writable, for
//  checkpoints.  NULL when the rule keeps none.
size_t
    kd_optimizer_state_count (kd_optimizer_t *self);
float *
    kd_optimizer_state (kd_optimizer_t *self);

//  Restore the step count after loading the state buffers (a checkpoint).
void
    kd_optimizer_set_steps (kd_optimizer_t *self, uint64_t steps);

#ifdef __cplusplus
}
#endif

#endif
