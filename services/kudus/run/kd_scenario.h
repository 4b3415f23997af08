/*  kd_scenario: an experiment scenario file (JSON), parsed and checked.

    A scenario says what to train (workers, model, batch, epochs, emulated
    compute), how fast each worker runs (kd_speed specs per rank, with
    seeded random ranks and seeded "shifting" redraws), which optimizers,
    consistency models and seeds to run, and when a run counts as done
    (targets, a cap).  The format is documented in docs/experiments.md,
    section "Scenario files"; kd_experiment.c runs what this class parses.

    Everything is checked at load time: JSON syntax, types, ranges (against
    the config table of `kudus local`, so a value the run would reject is
    rejected here), model names, and every speed spec of every listed seed.
    A malformed file gives NULL and one message that names the file and the
    field.
*/
#ifndef KD_SCENARIO_H_INCLUDED
#define KD_SCENARIO_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KD_SCENARIO_MAX_BYTES       (1 << 20)   //  largest scenario file
#define KD_SCENARIO_MAX_TARGETS     8           //  accuracy targets
#define KD_SCENARIO_MAX_SEEDS       64          //  evaluation seeds
#define KD_SCENARIO_MAX_OPTIMIZERS  8           //  optimizers
#define KD_SCENARIO_MAX_MODELS      32          //  consistency-model entries
#define KD_SCENARIO_MAX_PARAMS      16          //  controller settings per model
#define KD_SCENARIO_MAX_ASSIGN      64          //  speed assignments
#define KD_SCENARIO_MAX_FACTORS     16          //  shifting: factors to draw from
#define KD_SCENARIO_MAX_NAME        64          //  names of scenario, model, optimizer

typedef struct _kd_scenario_t kd_scenario_t;

//  Load and check a scenario file.  NULL with a message in err when the
//  file cannot be read or is malformed.  Caller owns return value.
kd_scenario_t *
    kd_scenario_load (const char *path, char *err, size_t err_size);

//  The same from text; origin names it in messages.  Caller owns return
//  value.
kd_scenario_t *
    kd_scenario_parse (const char *text, const char *origin, char *err, size_t err_size);

//  Destroy and null the caller's pointer.
void
    kd_scenario_destroy (kd_scenario_t **self_p);

//  The run's shape.
const char *
    kd_scenario_name (kd_scenario_t *self);
//  The sweep its runs belong to ("1" unless the file says "sweep").
const char *
    kd_scenario_sweep (kd_scenario_t *self);
int
    kd_scenario_workers (kd_scenario_t *self);
int
    kd_scenario_shards (kd_scenario_t *self);
const char *
    kd_scenario_model_kind (kd_scenario_t *self);       //  "mlp" or "softmax"
int
    kd_scenario_hidden (kd_scenario_t *self);
int
    kd_scenario_batch (kd_scenario_t *self);
double
    kd_scenario_epochs (kd_scenario_t *self);
double
    kd_scenario_delay_ms (kd_scenario_t *self);
double
    kd_scenario_cap_seconds (kd_scenario_t *self);

//  "network": true when given (runs use kudus local --netns), every
//  node's link, and the overrides joined with ',' ("" when none).
bool
    kd_scenario_netns (kd_scenario_t *self);
double
    kd_scenario_link_delay_ms (kd_scenario_t *self);
double
    kd_scenario_link_rate_mbit (kd_scenario_t *self);
double
    kd_scenario_link_loss (kd_scenario_t *self);
const char *
    kd_scenario_links (kd_scenario_t *self);

//  Accuracy targets, ascending; the primary target is one of them.
size_t
    kd_scenario_target_count (kd_scenario_t *self);
double
    kd_scenario_target_at (kd_scenario_t *self, size_t index);
double
    kd_scenario_target (kd_scenario_t *self);

//  Evaluation seeds, in the file's order.
size_t
    kd_scenario_seed_count (kd_scenario_t *self);
uint64_t
    kd_scenario_seed (kd_scenario_t *self, size_t index);

//  Optimizers: a name and a momentum.
size_t
    kd_scenario_optimizer_count (kd_scenario_t *self);
const char *
    kd_scenario_optimizer_name (kd_scenario_t *self, size_t index);
double
    kd_scenario_optimizer_momentum (kd_scenario_t *self, size_t index);

//  Consistency-model entries: a name, a consistency model, a learning rate
//  per optimizer, and controller settings as `kudus local` flags (name
//  without the dashes, value as text; a negative quota is already turned
//  into workers + quota).
size_t
    kd_scenario_model_count (kd_scenario_t *self);
const char *
    kd_scenario_model_name (kd_scenario_t *self, size_t index);
const char *
    kd_scenario_model_consistency (kd_scenario_t *self, size_t index);
double
    kd_scenario_model_lr (kd_scenario_t *self, size_t model, size_t optimizer);
size_t
    kd_scenario_param_count (kd_scenario_t *self, size_t model);
const char *
    kd_scenario_param_name (kd_scenario_t *self, size_t model, size_t index);
const char *
    kd_scenario_param_value (kd_scenario_t *self, size_t model, size_t index);

//  Index of a model entry by name, or -1.
int
    kd_scenario_model_find (kd_scenario_t *self, const char *name);

//  Each rank's kd_speed spec for a run seed: a NULL-terminated array of
//  kd_scenario_workers strings.  Random ranks and shifting redraws depend
//  only on the seed, so every model of a seed sees the same speeds.
//  Caller owns return value; free it with kd_scenario_speeds_free.
char **
    kd_scenario_speeds (kd_scenario_t *self, uint64_t seed);
void
    kd_scenario_speeds_free (char ***specs_p);

#endif
