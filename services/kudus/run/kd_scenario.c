/*  kd_scenario: experiment scenario files (format: docs/experiments.md,
    "Scenario files").

    The parser walks the JSON tree once, checks every field's type, and
    checks every value that becomes a `kudus local` flag by setting it on a
    scratch kudus-local config, so the ranges live in one place (the config
    table) and a value the run would refuse is refused at load time.

    Speeds are resolved per run seed: explicit ranks first, then each
    "random:K" assignment draws K of the ranks still free, then the default;
    a "shifting" block adds a seg: term per rank from seeded redraws.  All
    draws come from splitmix64 streams keyed by the seed alone, which is
    what pairs the runs of different models on one seed.
*/
#include "kd_scenario.h"
#include "kd_netns.h"
#include "kd_config.h"
#include "kd_controller.h"
#include "kd_speed.h"
#include "kd_util.h"
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_WORKERS   1024            //  ranks a scenario may name
#define S_MAX_DRAWS     1000            //  shifting: redraws per run
#define S_RANKS_SALT    0x72616e6b73ULL //  "ranks": random rank draws
#define S_SHIFT_SALT    0x7368696674ULL //  "shift": shifting redraws
#define S_SEED_TOKEN    "{seed}"        //  replaced by the run seed in specs

typedef struct {
    char *name;                             //  "lsp", "backup"
    char *consistency;                      //  bsp|asp|ssp|lsp|alsp|auto
    double lr [KD_SCENARIO_MAX_OPTIMIZERS]; //  per optimizer
    size_t n_params;                        //  controller settings
    char *param_name [KD_SCENARIO_MAX_PARAMS];   //  flag name, "quota-ratio"
    char *param_value [KD_SCENARIO_MAX_PARAMS];  //  value as text
} s_model_t;

typedef struct {
    int random;                 //  K of "random:K", 0 for explicit ranks
    int *ranks;                 //  explicit ranks
    size_t n_ranks;             //  how many
    char *spec;                 //  kd_speed spec ({seed} not yet replaced)
} s_assign_t;

struct _kd_scenario_t {
    char *name;                 //  scenario name (file names, result keys)
    char *sweep;                //  which sweep its runs belong to (result keys)
    int workers;                //  workers per run
    int shards;                 //  shards per run
    char *model_kind;           //  "mlp" or "softmax"
    int hidden;                 //  MLP hidden units
    int batch;                  //  minibatch per worker
    double epochs;              //  epoch budget
    double delay_ms;            //  emulated compute per iteration
    double cap;                 //  seconds of training at most
    bool netns;                 //  "network" given: kudus local --netns
    double net_delay_ms, net_rate_mbit, net_loss;   //  every node's link
    char *net_links;            //  link overrides, comma-joined
    double targets [KD_SCENARIO_MAX_TARGETS];   //  ascending
    size_t n_targets;           //  how many
    double target;              //  the primary one
    uint64_t seeds [KD_SCENARIO_MAX_SEEDS];     //  evaluation seeds
    size_t n_seeds;             //  how many
    char *opt_name [KD_SCENARIO_MAX_OPTIMIZERS];    //  "momentum", "sgd"
    double momentum [KD_SCENARIO_MAX_OPTIMIZERS];   //  their momentum
    size_t n_opts;              //  how many
    s_model_t models [KD_SCENARIO_MAX_MODELS];  //  consistency-model entries
    size_t n_models;            //  how many
    char *speed_default;        //  spec of ranks no assignment names
    s_assign_t assign [KD_SCENARIO_MAX_ASSIGN]; //  speed assignments
    size_t n_assign;            //  how many
    bool shifting;              //  shifting redraws on
    bool shift_initial;         //  a draw at time 0
    double shift_start;         //  first redraw, seconds
    double shift_every;         //  seconds between redraws
    double shift_fraction;      //  share of the workers redrawn each time
    double shift_until;         //  no redraw at or after this
    double factors [KD_SCENARIO_MAX_FACTORS];   //  drawn uniformly
    size_t n_factors;           //  how many
};

//  Parse context.
typedef struct {
    const char *origin;         //  file name for messages
    char *err;                  //  message buffer
    size_t err_size;            //  its size
    kd_config_t *config;        //  scratch kudus-local config for checks
} s_ctx_t;

//  --------------------------------------------------------------------------
//  Helpers

//  Set the error message ("scenario ORIGIN: ..."); always returns -1.
static int
s_err (s_ctx_t *ctx, const char *fmt, ...)
{
    int n = snprintf (ctx->err, ctx->err_size, "scenario %s: ", ctx->origin);
    if (n >= 0 && (size_t) n < ctx->err_size) {
        va_list args;
        va_start (args, fmt);
        vsnprintf (ctx->err + n, ctx->err_size - (size_t) n, fmt, args);
        va_end (args);
    }
    return -1;
}

static char *
s_strdup (const char *s)
{
    char *copy = strdup (s);
    assert (copy);
    return copy;
}

//  Name of a JSON type, for messages.
static const char *
s_type_name (json_object *o)
{
    switch (json_object_get_type (o)) {
        case json_type_null:    return "null";
        case json_type_boolean: return "a boolean";
        case json_type_double:
        case json_type_int:     return "a number";
        case json_type_string:  return "a string";
        case json_type_array:   return "an array";
        case json_type_object:  return "an object";
    }
    return "something else";
}

static bool
s_is_number (json_object *o)
{
    return json_object_is_type (o, json_type_int) || json_object_is_type (o, json_type_double);
}

//  Refuse keys outside allowed (a NULL-terminated list): typos are errors.
static int
s_check_keys (s_ctx_t *ctx, json_object *obj, const char *where, const char *const *allowed)
{
    json_object_object_foreach (obj, key, val) {
        (void) val;
        bool ok = false;
        for (size_t i = 0; allowed [i] && !ok; i++)
            ok = !strcmp (key, allowed [i]);
        if (!ok) {
            char list [512] = "";
            size_t len = 0;
            for (size_t i = 0; allowed [i] && len < sizeof list; i++)
                len += (size_t) snprintf (list + len, sizeof list - len, "%s%s", i ? ", " : "",
                                          allowed [i]);
            return s_err (ctx, "%s: unknown key '%s' (expected one of: %s)", where, key, list);
        }
    }
    return 0;
}

//  A number field; def is used when absent unless required.
static int
s_number (s_ctx_t *ctx, json_object *obj, const char *key, const char *where, bool required,
          double def, double *out)
{
    json_object *v;
    if (!json_object_object_get_ex (obj, key, &v)) {
        if (required)
            return s_err (ctx, "%s: '%s' is missing", where, key);
        *out = def;
        return 0;
    }
    if (!s_is_number (v))
        return s_err (ctx, "%s: '%s' must be a number, not %s", where, key, s_type_name (v));
    *out = json_object_get_double (v);
    if (!isfinite (*out))
        return s_err (ctx, "%s: '%s' is not a finite number", where, key);
    return 0;
}

//  A whole-number field.
static int
s_int (s_ctx_t *ctx, json_object *obj, const char *key, const char *where, bool required,
       int def, int *out)
{
    double v = 0;
    if (s_number (ctx, obj, key, where, required, def, &v))
        return -1;
    if (v != floor (v) || fabs (v) > 1e9)
        return s_err (ctx, "%s: '%s' must be a whole number, not %g", where, key, v);
    *out = (int) v;
    return 0;
}

//  A string field (borrowed from the JSON tree).
static int
s_string (s_ctx_t *ctx, json_object *obj, const char *key, const char *where, bool required,
          const char *def, const char **out)
{
    json_object *v;
    if (!json_object_object_get_ex (obj, key, &v)) {
        if (required)
            return s_err (ctx, "%s: '%s' is missing", where, key);
        *out = def;
        return 0;
    }
    if (!json_object_is_type (v, json_type_string))
        return s_err (ctx, "%s: '%s' must be a string, not %s", where, key, s_type_name (v));
    *out = json_object_get_string (v);
    return 0;
}

//  A name usable in file names and result keys.
static int
s_check_name (s_ctx_t *ctx, const char *name, const char *where)
{
    size_t len = strlen (name);
    if (len == 0 || len >= KD_SCENARIO_MAX_NAME)
        return s_err (ctx, "%s: name must be 1 to %d characters", where, KD_SCENARIO_MAX_NAME - 1);
    for (const char *p = name; *p; p++)
        if (!isalnum ((unsigned char) *p) && *p != '-' && *p != '_' && *p != '.')
            return s_err (ctx, "%s: name '%s' may hold only letters, digits, '-', '_' and '.'",
                          where, name);
    return 0;
}

//  Check a value the way `kudus local` will: set it on the scratch config.
static int
s_check_setting (s_ctx_t *ctx, const char *setting, const char *text, const char *where)
{
    char msg [256];
    if (kd_config_set (ctx->config, setting, text, msg, sizeof msg))
        return s_err (ctx, "%s: %s", where, msg);
    return 0;
}

//  A number as text, exactly enough for a flag.
static void
s_format (double v, char *out, size_t size)
{
    snprintf (out, size, "%.10g", v);
}

//  --------------------------------------------------------------------------
//  Sections

//  "targets" and "target".
static int
s_parse_targets (s_ctx_t *ctx, kd_scenario_t *self, json_object *root)
{
    json_object *arr;
    if (!json_object_object_get_ex (root, "targets", &arr)) {
        const double def [] = { 0.85, 0.86, 0.87 };
        self->n_targets = 3;
        memcpy (self->targets, def, sizeof def);
    }
    else {
        if (!json_object_is_type (arr, json_type_array))
            return s_err (ctx, "'targets' must be an array of numbers, not %s", s_type_name (arr));
        size_t n = json_object_array_length (arr);
        if (n == 0 || n > KD_SCENARIO_MAX_TARGETS)
            return s_err (ctx, "'targets' must hold 1 to %d numbers", KD_SCENARIO_MAX_TARGETS);
        for (size_t i = 0; i < n; i++) {
            json_object *v = json_object_array_get_idx (arr, i);
            if (!s_is_number (v))
                return s_err (ctx, "targets[%zu] must be a number, not %s", i, s_type_name (v));
            double t = json_object_get_double (v);
            if (!(t > 0 && t < 1))
                return s_err (ctx, "targets[%zu]: %g is not an accuracy in (0, 1)", i, t);
            if (i > 0 && !(t > self->targets [i - 1]))
                return s_err (ctx, "'targets' must be in ascending order");
            self->targets [i] = t;
        }
        self->n_targets = n;
    }
    //  The primary target: given, or the middle one.
    if (s_number (ctx, root, "target", "top level", false, self->targets [self->n_targets / 2],
                  &self->target))
        return -1;
    for (size_t i = 0; i < self->n_targets; i++)
        if (fabs (self->targets [i] - self->target) < 1e-12)
            return 0;
    return s_err (ctx, "'target' %g is not one of 'targets'", self->target);
}

//  "seeds".
static int
s_parse_seeds (s_ctx_t *ctx, kd_scenario_t *self, json_object *root)
{
    json_object *arr;
    if (!json_object_object_get_ex (root, "seeds", &arr)) {
        self->n_seeds = 3;
        for (size_t i = 0; i < 3; i++)
            self->seeds [i] = i + 1;
        return 0;
    }
    if (!json_object_is_type (arr, json_type_array))
        return s_err (ctx, "'seeds' must be an array of whole numbers, not %s", s_type_name (arr));
    size_t n = json_object_array_length (arr);
    if (n == 0 || n > KD_SCENARIO_MAX_SEEDS)
        return s_err (ctx, "'seeds' must hold 1 to %d seeds", KD_SCENARIO_MAX_SEEDS);
    for (size_t i = 0; i < n; i++) {
        json_object *v = json_object_array_get_idx (arr, i);
        if (!json_object_is_type (v, json_type_int) || json_object_get_int64 (v) < 0)
            return s_err (ctx, "seeds[%zu] must be a whole number >= 0, not %s", i,
                          json_object_to_json_string (v));
        self->seeds [i] = (uint64_t) json_object_get_int64 (v);
        for (size_t j = 0; j < i; j++)
            if (self->seeds [j] == self->seeds [i])
                return s_err (ctx, "seed %llu is listed twice", (unsigned long long) self->seeds [i]);
        char text [32];
        snprintf (text, sizeof text, "%llu", (unsigned long long) self->seeds [i]);
        char where [32];
        snprintf (where, sizeof where, "seeds[%zu]", i);
        if (s_check_setting (ctx, "seed", text, where))
            return -1;
    }
    self->n_seeds = n;
    return 0;
}

//  "optimizers".
static int
s_parse_optimizers (s_ctx_t *ctx, kd_scenario_t *self, json_object *root)
{
    json_object *arr;
    if (!json_object_object_get_ex (root, "optimizers", &arr)) {
        self->opt_name [0] = s_strdup ("momentum");
        self->momentum [0] = 0.9;
        self->n_opts = 1;
        return 0;
    }
    if (!json_object_is_type (arr, json_type_array))
        return s_err (ctx, "'optimizers' must be an array of objects, not %s", s_type_name (arr));
    size_t n = json_object_array_length (arr);
    if (n == 0 || n > KD_SCENARIO_MAX_OPTIMIZERS)
        return s_err (ctx, "'optimizers' must hold 1 to %d entries", KD_SCENARIO_MAX_OPTIMIZERS);
    static const char *const keys [] = { "name", "momentum", NULL };
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx (arr, i);
        char where [64];
        snprintf (where, sizeof where, "optimizers[%zu]", i);
        if (!json_object_is_type (o, json_type_object))
            return s_err (ctx, "%s must be an object, not %s", where, s_type_name (o));
        const char *name;
        double momentum;
        if (s_check_keys (ctx, o, where, keys)
        ||  s_string (ctx, o, "name", where, true, NULL, &name)
        ||  s_check_name (ctx, name, where)
        ||  s_number (ctx, o, "momentum", where, true, 0, &momentum))
            return -1;
        char text [32];
        s_format (momentum, text, sizeof text);
        if (s_check_setting (ctx, "momentum", text, where))
            return -1;
        for (size_t j = 0; j < i; j++)
            if (!strcmp (self->opt_name [j], name))
                return s_err (ctx, "optimizer '%s' is listed twice", name);
        self->opt_name [i] = s_strdup (name);
        self->momentum [i] = momentum;
        self->n_opts = i + 1;
    }
    return 0;
}

//  A learning rate: a number for every optimizer, or one per optimizer
//  name.  Returns 0, or -1 with the error set; 1 when absent.
static int
s_parse_lr (s_ctx_t *ctx, kd_scenario_t *self, json_object *obj, const char *where, double *lr)
{
    json_object *v;
    if (!json_object_object_get_ex (obj, "lr", &v))
        return 1;
    if (s_is_number (v)) {
        for (size_t i = 0; i < self->n_opts; i++)
            lr [i] = json_object_get_double (v);
    }
    else
    if (json_object_is_type (v, json_type_object)) {
        for (size_t i = 0; i < self->n_opts; i++)
            lr [i] = NAN;
        json_object_object_foreach (v, key, val) {
            size_t i = 0;
            while (i < self->n_opts && strcmp (self->opt_name [i], key))
                i++;
            if (i == self->n_opts)
                return s_err (ctx, "%s: 'lr' names optimizer '%s', which 'optimizers' does not list",
                              where, key);
            if (!s_is_number (val))
                return s_err (ctx, "%s: lr of '%s' must be a number, not %s", where, key,
                              s_type_name (val));
            lr [i] = json_object_get_double (val);
        }
        for (size_t i = 0; i < self->n_opts; i++)
            if (isnan (lr [i]))
                return s_err (ctx, "%s: 'lr' has no value for optimizer '%s'", where,
                              self->opt_name [i]);
    }
    else
        return s_err (ctx, "%s: 'lr' must be a number or an object of numbers per optimizer, not %s",
                      where, s_type_name (v));
    for (size_t i = 0; i < self->n_opts; i++) {
        char text [32];
        s_format (lr [i], text, sizeof text);
        if (s_check_setting (ctx, "lr", text, where))
            return -1;
    }
    return 0;
}

//  The table row of a kudus-local setting, or NULL.
static const kd_setting_t *
s_local_setting (const char *name)
{
    size_t count;
    const kd_setting_t *table = kd_config_table (&count);
    for (size_t i = 0; i < count; i++)
        if (!strcmp (table [i].name, name) && (table [i].services & KD_SVC_LOCAL))
            return &table [i];
    return NULL;
}

//  One controller setting of a model entry: JSON key with '_', flag with '-'.
static int
s_parse_param (s_ctx_t *ctx, kd_scenario_t *self, s_model_t *model, const char *key,
               json_object *val, const char *where)
{
    char flag [64];
    snprintf (flag, sizeof flag, "%s", key);
    for (char *p = flag; *p; p++)
        if (*p == '_')
            *p = '-';
    const kd_setting_t *row = s_local_setting (flag);
    if (!row)
        return s_err (ctx, "%s: '%s' is not a setting of this build's kudus local", where, key);
    char text [128];
    if ((row->type == KD_CT_INT || row->type == KD_CT_DOUBLE) && row->choices
    &&  json_object_is_type (val, json_type_string))
        //  A word a number setting also takes (barrier_spread "auto"); the
        //  config table checks it below.
        snprintf (text, sizeof text, "%s", json_object_get_string (val));
    else
    if (row->type == KD_CT_INT || row->type == KD_CT_DOUBLE) {
        if (!s_is_number (val))
            return s_err (ctx, "%s: '%s' must be a number, not %s", where, key, s_type_name (val));
        double v = json_object_get_double (val);
        //  A negative quota counts back from the number of workers: -2 is N-2.
        if (!strcmp (flag, "quota") && v < 0) {
            v += self->workers;
            if (v < 1)
                return s_err (ctx, "%s: quota %g leaves no worker out of %d", where,
                              json_object_get_double (val), self->workers);
        }
        s_format (v, text, sizeof text);
    }
    else
    if (row->type == KD_CT_BOOL) {
        if (!json_object_is_type (val, json_type_boolean))
            return s_err (ctx, "%s: '%s' must be true or false, not %s", where, key, s_type_name (val));
        snprintf (text, sizeof text, "%s", json_object_get_boolean (val) ? "true" : "false");
    }
    else {
        if (!json_object_is_type (val, json_type_string))
            return s_err (ctx, "%s: '%s' must be a string, not %s", where, key, s_type_name (val));
        snprintf (text, sizeof text, "%s", json_object_get_string (val));
    }
    if (s_check_setting (ctx, flag, text, where))
        return -1;
    if (model->n_params == KD_SCENARIO_MAX_PARAMS)
        return s_err (ctx, "%s: more than %d settings", where, KD_SCENARIO_MAX_PARAMS);
    model->param_name [model->n_params] = s_strdup (flag);
    model->param_value [model->n_params] = s_strdup (text);
    model->n_params++;
    return 0;
}

//  "models".
static int
s_parse_models (s_ctx_t *ctx, kd_scenario_t *self, json_object *root)
{
    static const char *const params [] = {
        "staleness", "quota", "quota_ratio", "window_ms", "group_ratio", "min_group",
        "max_groups", "group_staleness", "group_step", "regroup_dwell", "staleness_weight",
        "global_sync_every", "barrier", "barrier_slack", "barrier_spread", "speed_source", NULL
    };
    json_object *arr;
    if (!json_object_object_get_ex (root, "models", &arr))
        return s_err (ctx, "'models' is missing");
    if (!json_object_is_type (arr, json_type_array))
        return s_err (ctx, "'models' must be an array of objects, not %s", s_type_name (arr));
    size_t n = json_object_array_length (arr);
    if (n == 0 || n > KD_SCENARIO_MAX_MODELS)
        return s_err (ctx, "'models' must hold 1 to %d entries", KD_SCENARIO_MAX_MODELS);
    double top_lr [KD_SCENARIO_MAX_OPTIMIZERS];
    int have_top = s_parse_lr (ctx, self, root, "top level", top_lr);
    if (have_top < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_array_get_idx (arr, i);
        char where [128];
        snprintf (where, sizeof where, "models[%zu]", i);
        if (!json_object_is_type (o, json_type_object))
            return s_err (ctx, "%s must be an object, not %s", where, s_type_name (o));
        const char *name, *consistency;
        if (s_string (ctx, o, "name", where, true, NULL, &name) || s_check_name (ctx, name, where))
            return -1;
        snprintf (where, sizeof where, "models[%zu] '%s'", i, name);
        for (size_t j = 0; j < i; j++)
            if (!strcmp (self->models [j].name, name))
                return s_err (ctx, "model '%s' is listed twice", name);
        if (s_string (ctx, o, "consistency", where, false, name, &consistency))
            return -1;
        if (kd_consistency_parse (consistency) < 0)
            return s_err (ctx, "%s: unknown consistency model '%s' (bsp, asp, ssp, lsp, alsp or auto; "
                          "an entry named otherwise needs \"consistency\")", where, consistency);
        s_model_t *model = &self->models [i];
        model->name = s_strdup (name);
        model->consistency = s_strdup (consistency);
        self->n_models = i + 1;
        int rc = s_parse_lr (ctx, self, o, where, model->lr);
        if (rc < 0)
            return -1;
        if (rc == 1) {
            if (have_top == 1)
                return s_err (ctx, "%s: no 'lr' here or at the top level", where);
            memcpy (model->lr, top_lr, sizeof top_lr);
        }
        json_object_object_foreach (o, key, val) {
            if (!strcmp (key, "name") || !strcmp (key, "consistency") || !strcmp (key, "lr"))
                continue;
            bool known = false;
            for (size_t k = 0; params [k] && !known; k++)
                known = !strcmp (key, params [k]);
            if (!known)
                return s_err (ctx, "%s: unknown key '%s' (expected name, consistency, lr, staleness, "
                              "quota, quota_ratio, window_ms, group_ratio, min_group, max_groups, "
                              "group_staleness, group_step, regroup_dwell, staleness_weight, barrier, barrier_slack, "
                              "barrier_spread, speed_source)",
                              where, key);
            if (s_parse_param (ctx, self, model, key, val, where))
                return -1;
        }
    }
    return 0;
}

//  One speed assignment: {"ranks": [..] or "random:K", "spec": "..."}.
static int
s_parse_assign (s_ctx_t *ctx, kd_scenario_t *self, json_object *o, size_t index, bool *taken,
                int *random_total)
{
    char where [64];
    snprintf (where, sizeof where, "speeds.assign[%zu]", index);
    static const char *const keys [] = { "ranks", "spec", NULL };
    if (!json_object_is_type (o, json_type_object))
        return s_err (ctx, "%s must be an object, not %s", where, s_type_name (o));
    const char *spec;
    if (s_check_keys (ctx, o, where, keys) || s_string (ctx, o, "spec", where, true, NULL, &spec))
        return -1;
    s_assign_t *a = &self->assign [index];
    a->spec = s_strdup (spec);
    self->n_assign = index + 1;
    json_object *ranks;
    if (!json_object_object_get_ex (o, "ranks", &ranks))
        return s_err (ctx, "%s: 'ranks' is missing", where);
    if (json_object_is_type (ranks, json_type_string)) {
        const char *text = json_object_get_string (ranks);
        char *end = NULL;
        long k = strncmp (text, "random:", 7) == 0 ? strtol (text + 7, &end, 10) : -1;
        if (!end || *end || end == text + 7 || k < 1)
            return s_err (ctx, "%s: 'ranks' must be a list of ranks or \"random:K\" with K >= 1, "
                          "not \"%s\"", where, text);
        a->random = (int) (k > S_MAX_WORKERS ? S_MAX_WORKERS + 1 : k);
        *random_total += a->random;
        return 0;
    }
    if (!json_object_is_type (ranks, json_type_array))
        return s_err (ctx, "%s: 'ranks' must be a list of ranks or \"random:K\", not %s", where,
                      s_type_name (ranks));
    size_t n = json_object_array_length (ranks);
    if (n == 0)
        return s_err (ctx, "%s: 'ranks' is empty", where);
    a->ranks = (int *) calloc (n, sizeof (int));
    assert (a->ranks);
    for (size_t i = 0; i < n; i++) {
        json_object *v = json_object_array_get_idx (ranks, i);
        int64_t r = json_object_is_type (v, json_type_int) ? json_object_get_int64 (v) : -1;
        if (r < 0 || r >= self->workers)
            return s_err (ctx, "%s: ranks[%zu] must be a rank in [0, %d), not %s", where, i,
                          self->workers, json_object_to_json_string (v));
        if (taken [r])
            return s_err (ctx, "%s: rank %lld is assigned a speed twice", where, (long long) r);
        taken [r] = true;
        a->ranks [a->n_ranks++] = (int) r;
    }
    return 0;
}

//  "shifting": seeded redraws of a fraction of the workers.
static int
s_parse_shifting (s_ctx_t *ctx, kd_scenario_t *self, json_object *o)
{
    const char *where = "speeds.shifting";
    static const char *const keys [] = { "start", "every", "fraction", "factors", "until",
                                         "initial", NULL };
    if (!json_object_is_type (o, json_type_object))
        return s_err (ctx, "%s must be an object, not %s", where, s_type_name (o));
    if (s_check_keys (ctx, o, where, keys)
    ||  s_number (ctx, o, "start", where, true, 0, &self->shift_start)
    ||  s_number (ctx, o, "every", where, true, 0, &self->shift_every)
    ||  s_number (ctx, o, "fraction", where, false, 0.5, &self->shift_fraction)
    ||  s_number (ctx, o, "until", where, false, self->cap, &self->shift_until))
        return -1;
    self->shift_initial = true;
    json_object *v;
    if (json_object_object_get_ex (o, "initial", &v)) {
        if (!json_object_is_type (v, json_type_boolean))
            return s_err (ctx, "%s: 'initial' must be true or false, not %s", where, s_type_name (v));
        self->shift_initial = json_object_get_boolean (v);
    }
    if (!(self->shift_start >= 0) || !(self->shift_every > 0) || !(self->shift_until >= 0))
        return s_err (ctx, "%s: 'start' and 'until' must be >= 0 and 'every' > 0", where);
    if (!(self->shift_fraction > 0 && self->shift_fraction <= 1))
        return s_err (ctx, "%s: 'fraction' must be in (0, 1]", where);
    if ((self->shift_until - self->shift_start) / self->shift_every > S_MAX_DRAWS)
        return s_err (ctx, "%s: more than %d redraws before 'until'", where, S_MAX_DRAWS);
    if (!json_object_object_get_ex (o, "factors", &v) || !json_object_is_type (v, json_type_array)
    ||  json_object_array_length (v) == 0 || json_object_array_length (v) > KD_SCENARIO_MAX_FACTORS)
        return s_err (ctx, "%s: 'factors' must be an array of 1 to %d factors", where,
                      KD_SCENARIO_MAX_FACTORS);
    for (size_t i = 0; i < json_object_array_length (v); i++) {
        json_object *f = json_object_array_get_idx (v, i);
        double x = s_is_number (f) ? json_object_get_double (f) : -1;
        if (!(x > 0 && x <= KD_SPEED_MAX_FACTOR))
            return s_err (ctx, "%s: factors[%zu] must be a number in (0, %g]", where, i,
                          KD_SPEED_MAX_FACTOR);
        self->factors [i] = x;
    }
    self->n_factors = json_object_array_length (v);
    self->shifting = true;
    return 0;
}

//  "speeds": {"default": SPEC, "assign": [...], "shifting": {...}}.
static int
s_parse_speeds (s_ctx_t *ctx, kd_scenario_t *self, json_object *root)
{
    json_object *o;
    if (!json_object_object_get_ex (root, "speeds", &o)) {
        self->speed_default = s_strdup ("");
        return 0;
    }
    static const char *const keys [] = { "default", "assign", "shifting", NULL };
    if (!json_object_is_type (o, json_type_object))
        return s_err (ctx, "'speeds' must be an object, not %s", s_type_name (o));
    const char *def;
    if (s_check_keys (ctx, o, "speeds", keys)
    ||  s_string (ctx, o, "default", "speeds", false, "", &def))
        return -1;
    self->speed_default = s_strdup (def);
    bool taken [S_MAX_WORKERS] = { false };
    int random_total = 0, explicit_total = 0;
    json_object *arr;
    if (json_object_object_get_ex (o, "assign", &arr)) {
        if (!json_object_is_type (arr, json_type_array))
            return s_err (ctx, "speeds.assign must be an array, not %s", s_type_name (arr));
        size_t n = json_object_array_length (arr);
        if (n > KD_SCENARIO_MAX_ASSIGN)
            return s_err (ctx, "speeds.assign: more than %d entries", KD_SCENARIO_MAX_ASSIGN);
        for (size_t i = 0; i < n; i++)
            if (s_parse_assign (ctx, self, json_object_array_get_idx (arr, i), i, taken, &random_total))
                return -1;
    }
    for (int r = 0; r < self->workers; r++)
        explicit_total += taken [r];
    if (explicit_total + random_total > self->workers)
        return s_err (ctx, "speeds.assign names %d explicit and %d random ranks, more than the %d workers",
                      explicit_total, random_total, self->workers);
    json_object *shift;
    if (json_object_object_get_ex (o, "shifting", &shift) && s_parse_shifting (ctx, self, shift))
        return -1;
    return 0;
}

//  The run's shape: every value is checked as the kudus-local flag it
//  becomes.
//  A scenario key whose number must fit the bounds of its setting.
typedef struct {
    const char *key, *setting;
    double value;
} s_number_check_t;

static int
s_check_numbers (s_ctx_t *ctx, const s_number_check_t *checks, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char text [32];
        s_format (checks [i].value, text, sizeof text);
        if (s_check_setting (ctx, checks [i].setting, text, checks [i].key))
            return -1;
    }
    return 0;
}

//  "network": every service in a namespace of its own behind a shaped link
//  (kudus local --netns): {"delay_ms", "rate_mbit", "loss", "links": [...]}
static int
s_parse_network (s_ctx_t *ctx, kd_scenario_t *self, json_object *root)
{
    json_object *o;
    if (!json_object_object_get_ex (root, "network", &o))
        return 0;
    const char *w = "network";
    if (!json_object_is_type (o, json_type_object))
        return s_err (ctx, "'network' must be an object, not %s", s_type_name (o));
    static const char *const keys [] = { "delay_ms", "rate_mbit", "loss", "links", NULL };
    if (s_check_keys (ctx, o, w, keys)
    ||  s_number (ctx, o, "delay_ms", w, false, 0, &self->net_delay_ms)
    ||  s_number (ctx, o, "rate_mbit", w, false, 0, &self->net_rate_mbit)
    ||  s_number (ctx, o, "loss", w, false, 0, &self->net_loss))
        return -1;
    s_number_check_t checks [] = {
        { "network.delay_ms", "link-delay-ms", self->net_delay_ms },
        { "network.rate_mbit", "link-rate-mbit", self->net_rate_mbit },
        { "network.loss", "link-loss", self->net_loss },
    };
    if (s_check_numbers (ctx, checks, sizeof checks / sizeof checks [0]))
        return -1;
    char joined [4096] = "";
    json_object *arr;
    if (json_object_object_get_ex (o, "links", &arr)) {
        if (!json_object_is_type (arr, json_type_array))
            return s_err (ctx, "network: 'links' must be an array of strings, not %s", s_type_name (arr));
        for (size_t i = 0; i < json_object_array_length (arr); i++) {
            json_object *v = json_object_array_get_idx (arr, i);
            if (!json_object_is_type (v, json_type_string))
                return s_err (ctx, "network: links [%zu] must be a string, not %s", i, s_type_name (v));
            const char *spec = json_object_get_string (v);
            kd_link_t probe = { 0 };
            char why [256];
            if (kd_netns_override (spec, "worker", 0, &probe, why, sizeof why) < 0)
                return s_err (ctx, "network: links [%zu]: %s", i, why);
            size_t len = strlen (joined);
            if (len + strlen (spec) + 2 > sizeof joined)
                return s_err (ctx, "network: 'links' is longer than %zu characters", sizeof joined - 1);
            snprintf (joined + len, sizeof joined - len, "%s%s", len ? "," : "", spec);
        }
    }
    self->net_links = s_strdup (joined);
    self->netns = true;
    return 0;
}

static int
s_parse_shape (s_ctx_t *ctx, kd_scenario_t *self, json_object *root)
{
    const char *name = NULL, *model = NULL;
    const char *w = "top level";
    if (s_string (ctx, root, "name", w, true, NULL, &name) || s_check_name (ctx, name, w))
        return -1;
    self->name = s_strdup (name);
    //  Records of one sweep never stand in for another's: a sweep is a
    //  set of frozen rules and defaults, and the report shows each apart.
    const char *sweep = NULL;
    if (s_string (ctx, root, "sweep", w, false, "1", &sweep) || s_check_name (ctx, sweep, w))
        return -1;
    self->sweep = s_strdup (sweep);
    if (s_int (ctx, root, "workers", w, true, 0, &self->workers)
    ||  s_int (ctx, root, "shards", w, false, 2, &self->shards)
    ||  s_string (ctx, root, "model", w, false, "mlp", &model)
    ||  s_int (ctx, root, "hidden", w, false, 128, &self->hidden)
    ||  s_int (ctx, root, "batch", w, false, 32, &self->batch)
    ||  s_number (ctx, root, "epochs", w, false, 10, &self->epochs)
    ||  s_number (ctx, root, "delay_ms", w, false, 0, &self->delay_ms)
    ||  s_number (ctx, root, "cap_seconds", w, false, 180, &self->cap))
        return -1;
    self->model_kind = s_strdup (model);
    //  'workers' is the local cluster's built-in workers, which may be 0
    //  beside external ones; a scenario has no external workers.
    if (self->workers < 1)
        return s_err (ctx, "%s: 'workers' is out of range: %d, at least 1", w, self->workers);
    s_number_check_t checks [] = {
        { "workers", "workers", self->workers }, { "shards", "shards", self->shards },
        { "hidden", "hidden", self->hidden }, { "batch", "batch", self->batch },
        { "epochs", "epochs", self->epochs }, { "delay_ms", "delay-ms", self->delay_ms },
        { "cap_seconds", "max-seconds", self->cap },
    };
    if (s_check_numbers (ctx, checks, sizeof checks / sizeof checks [0]))
        return -1;
    if (!(self->cap > 0))
        return s_err (ctx, "'cap_seconds' must be greater than 0");
    if (self->workers > S_MAX_WORKERS)
        return s_err (ctx, "'workers': at most %d", S_MAX_WORKERS);
    return s_check_setting (ctx, "model", model, "model");
}

//  --------------------------------------------------------------------------
//  Speeds of a run

//  Pick k distinct values out of pool [0, n) with a partial Fisher-Yates
//  shuffle; the first k entries of pool are the pick.
static void
s_pick (int *pool, size_t n, size_t k, uint64_t *rng)
{
    for (size_t i = 0; i < k && i < n; i++) {
        size_t j = i + (size_t) (kd_splitmix64 (rng) % (n - i));
        int t = pool [i];
        pool [i] = pool [j];
        pool [j] = t;
    }
}

//  Replace every {seed} in spec by the seed.  Caller frees.
static char *
s_substitute (const char *spec, uint64_t seed)
{
    char num [32];
    snprintf (num, sizeof num, "%llu", (unsigned long long) seed);
    size_t tok = strlen (S_SEED_TOKEN), n = 0;
    for (const char *p = strstr (spec, S_SEED_TOKEN); p; p = strstr (p + tok, S_SEED_TOKEN))
        n++;
    size_t size = strlen (spec) + n * strlen (num) + 1;
    char *out = (char *) malloc (size);
    assert (out);
    char *o = out;
    for (const char *p = spec; *p; ) {
        if (!strncmp (p, S_SEED_TOKEN, tok)) {
            o += sprintf (o, "%s", num);
            p += tok;
        }
        else
            *o++ = *p++;
    }
    *o = 0;
    return out;
}

//  Append text to a growing string.
static void
s_append (char **s, const char *text)
{
    size_t a = strlen (*s), b = strlen (text);
    char *grown = (char *) realloc (*s, a + b + 1);
    assert (grown);
    memcpy (grown + a, text, b + 1);
    *s = grown;
}

//  Add each rank's "seg:" term for the shifting redraws of a seed.
static void
s_add_shifting (kd_scenario_t *self, uint64_t seed, char **specs)
{
    size_t n = (size_t) self->workers;
    double times [S_MAX_DRAWS + 2];
    size_t n_times = 0;
    if (self->shift_initial)
        times [n_times++] = 0;
    for (double t = self->shift_start; t < self->shift_until && n_times < S_MAX_DRAWS + 1;
         t += self->shift_every)
        if (n_times == 0 || t > times [n_times - 1])
            times [n_times++] = t;
    //  factor [d * n + r]: rank r's factor from draw d on.
    double *factor = (double *) calloc ((n_times + 1) * n, sizeof (double));
    int *pool = (int *) calloc (n, sizeof (int));
    assert (factor && pool);
    uint64_t rng = kd_mix64 (seed ^ S_SHIFT_SALT);
    size_t k = (size_t) lround (self->shift_fraction * (double) n);
    for (size_t d = 0; d < n_times; d++) {
        for (size_t r = 0; r < n; r++) {
            factor [d * n + r] = d ? factor [(d - 1) * n + r] : 1;
            pool [r] = (int) r;
        }
        s_pick (pool, n, k, &rng);
        for (size_t i = 0; i < k; i++)
            factor [d * n + (size_t) pool [i]] = self->factors [kd_splitmix64 (&rng) % self->n_factors];
    }
    for (size_t r = 0; r < n; r++) {
        char *seg = s_strdup ("");
        size_t d = 0;
        while (d < n_times) {
            double f = factor [d * n + r];
            size_t e = d + 1;
            while (e < n_times && factor [e * n + r] == f)
                e++;
            if (f != 1) {
                char part [96];
                if (e < n_times)
                    snprintf (part, sizeof part, "%s%.10g-%.10g=%.10g", *seg ? "," : "seg:",
                              times [d], times [e], f);
                else
                    snprintf (part, sizeof part, "%s%.10g-=%.10g", *seg ? "," : "seg:", times [d], f);
                s_append (&seg, part);
            }
            d = e;
        }
        if (*seg) {
            if (*specs [r])
                s_append (&specs [r], " ");
            s_append (&specs [r], seg);
        }
        free (seg);
    }
    free (factor);
    free (pool);
}

//  Each rank's spec for a seed.
char **
kd_scenario_speeds (kd_scenario_t *self, uint64_t seed)
{
    assert (self);
    size_t n = (size_t) self->workers;
    char **specs = (char **) calloc (n + 1, sizeof (char *));
    int *pool = (int *) calloc (n, sizeof (int));
    assert (specs && pool);
    const char **chosen = (const char **) calloc (n, sizeof (char *));
    assert (chosen);
    //  Explicit ranks first, so random draws never take them.
    for (size_t a = 0; a < self->n_assign; a++)
        for (size_t i = 0; i < self->assign [a].n_ranks; i++)
            chosen [self->assign [a].ranks [i]] = self->assign [a].spec;
    uint64_t rng = kd_mix64 (seed ^ S_RANKS_SALT);
    for (size_t a = 0; a < self->n_assign; a++) {
        if (!self->assign [a].random)
            continue;
        size_t free_n = 0;
        for (size_t r = 0; r < n; r++)
            if (!chosen [r])
                pool [free_n++] = (int) r;
        size_t k = (size_t) self->assign [a].random;
        assert (k <= free_n);   //  checked at load time
        s_pick (pool, free_n, k, &rng);
        for (size_t i = 0; i < k; i++)
            chosen [pool [i]] = self->assign [a].spec;
    }
    for (size_t r = 0; r < n; r++)
        specs [r] = s_substitute (chosen [r] ? chosen [r] : self->speed_default, seed);
    if (self->shifting)
        s_add_shifting (self, seed, specs);
    free (chosen);
    free (pool);
    return specs;
}

//  Free what kd_scenario_speeds returned.
void
kd_scenario_speeds_free (char ***specs_p)
{
    assert (specs_p);
    if (!*specs_p)
        return;
    for (char **p = *specs_p; *p; p++)
        free (*p);
    free (*specs_p);
    *specs_p = NULL;
}

//  Every spec of every listed seed must parse.
static int
s_check_speeds (s_ctx_t *ctx, kd_scenario_t *self)
{
    for (size_t s = 0; s < self->n_seeds; s++) {
        char **specs = kd_scenario_speeds (self, self->seeds [s]);
        int rc = 0;
        for (int r = 0; r < self->workers && rc == 0; r++) {
            char msg [256];
            kd_speed_t *speed = kd_speed_new (specs [r], 0, msg, sizeof msg);
            if (!speed)
                rc = s_err (ctx, "speeds of rank %d with seed %llu ('%.60s'): %s", r,
                            (unsigned long long) self->seeds [s], specs [r], msg);
            kd_speed_destroy (&speed);
        }
        kd_scenario_speeds_free (&specs);
        if (rc)
            return -1;
    }
    return 0;
}

//  --------------------------------------------------------------------------
//  Load, destroy, accessors

//  Parse scenario text.
kd_scenario_t *
kd_scenario_parse (const char *text, const char *origin, char *err, size_t err_size)
{
    assert (text && err && err_size > 0);
    s_ctx_t ctx = { .origin = origin ? origin : "(text)", .err = err, .err_size = err_size };
    err [0] = 0;
    size_t len = strlen (text);
    if (len > KD_SCENARIO_MAX_BYTES) {
        s_err (&ctx, "larger than %d bytes", KD_SCENARIO_MAX_BYTES);
        return NULL;
    }
    json_tokener *tok = json_tokener_new ();
    assert (tok);
    //  Strict: no trailing commas, no single quotes, as other readers expect.
    json_tokener_set_flags (tok, JSON_TOKENER_STRICT);
    json_object *root = json_tokener_parse_ex (tok, text, (int) len);
    enum json_tokener_error jerr = json_tokener_get_error (tok);
    size_t end = json_tokener_get_parse_end (tok);
    json_tokener_free (tok);
    if (!root || jerr != json_tokener_success) {
        //  Where it went wrong, as a line number.
        size_t at = end < len ? end : len, line = 1;
        for (size_t i = 0; i < at; i++)
            line += text [i] == '\n';
        s_err (&ctx, "malformed JSON near line %zu: %s", line,
               jerr == json_tokener_continue ? "unexpected end of file" : json_tokener_error_desc (jerr));
        json_object_put (root);
        return NULL;
    }
    for (size_t i = end; i < len; i++)
        if (!isspace ((unsigned char) text [i])) {
            s_err (&ctx, "malformed JSON: text after the top-level object");
            json_object_put (root);
            return NULL;
        }
    kd_scenario_t *self = (kd_scenario_t *) calloc (1, sizeof *self);
    assert (self);
    ctx.config = kd_config_new (KD_SVC_LOCAL, "scenario");
    static const char *const keys [] = {
        "name", "description", "notes", "workers", "shards", "model", "hidden", "batch", "epochs",
        "delay_ms", "cap_seconds", "targets", "target", "seeds", "speeds", "optimizers", "lr",
        "models", "network", "sweep", NULL
    };
    int rc = -1;
    if (!json_object_is_type (root, json_type_object)) {
        s_err (&ctx, "the top level must be an object, not %s", s_type_name (root));
        goto cleanup;
    }
    const char *ignored;
    if (s_check_keys (&ctx, root, "top level", keys)
    ||  s_string (&ctx, root, "description", "top level", false, "", &ignored)
    ||  s_string (&ctx, root, "notes", "top level", false, "", &ignored)
    ||  s_parse_shape (&ctx, self, root)
    ||  s_parse_network (&ctx, self, root)
    ||  s_parse_targets (&ctx, self, root)
    ||  s_parse_seeds (&ctx, self, root)
    ||  s_parse_optimizers (&ctx, self, root)
    ||  s_parse_models (&ctx, self, root)
    ||  s_parse_speeds (&ctx, self, root)
    ||  s_check_speeds (&ctx, self))
        goto cleanup;
    rc = 0;
cleanup:
    kd_config_destroy (&ctx.config);
    json_object_put (root);
    if (rc)
        kd_scenario_destroy (&self);
    return self;
}

//  Load a scenario file.
kd_scenario_t *
kd_scenario_load (const char *path, char *err, size_t err_size)
{
    assert (path);
    FILE *f = fopen (path, "rb");
    if (!f) {
        snprintf (err, err_size, "scenario %s: cannot read: %s", path, strerror (errno));
        return NULL;
    }
    char *text = (char *) malloc (KD_SCENARIO_MAX_BYTES + 2);
    assert (text);
    size_t n = fread (text, 1, KD_SCENARIO_MAX_BYTES + 1, f);
    fclose (f);
    kd_scenario_t *self = NULL;
    if (n > KD_SCENARIO_MAX_BYTES)
        snprintf (err, err_size, "scenario %s: larger than %d bytes", path, KD_SCENARIO_MAX_BYTES);
    else
    if (memchr (text, 0, n))
        snprintf (err, err_size, "scenario %s: holds a NUL byte; not a JSON text file", path);
    else {
        text [n] = 0;
        self = kd_scenario_parse (text, path, err, err_size);
    }
    free (text);
    return self;
}

//  Destroy a scenario.
void
kd_scenario_destroy (kd_scenario_t **self_p)
{
    assert (self_p);
    kd_scenario_t *self = *self_p;
    if (!self)
        return;
    free (self->name);
    free (self->sweep);
    free (self->model_kind);
    free (self->net_links);
    for (size_t i = 0; i < self->n_opts; i++)
        free (self->opt_name [i]);
    for (size_t i = 0; i < self->n_models; i++) {
        s_model_t *m = &self->models [i];
        free (m->name);
        free (m->consistency);
        for (size_t k = 0; k < m->n_params; k++) {
            free (m->param_name [k]);
            free (m->param_value [k]);
        }
    }
    free (self->speed_default);
    for (size_t i = 0; i < self->n_assign; i++) {
        free (self->assign [i].ranks);
        free (self->assign [i].spec);
    }
    free (self);
    *self_p = NULL;
}

//  Accessors (documented in kd_scenario.h); they borrow.
const char *kd_scenario_name (kd_scenario_t *self) { return self->name; }
const char *kd_scenario_sweep (kd_scenario_t *self) { return self->sweep; }
int kd_scenario_workers (kd_scenario_t *self) { return self->workers; }
int kd_scenario_shards (kd_scenario_t *self) { return self->shards; }
const char *kd_scenario_model_kind (kd_scenario_t *self) { return self->model_kind; }
int kd_scenario_hidden (kd_scenario_t *self) { return self->hidden; }
int kd_scenario_batch (kd_scenario_t *self) { return self->batch; }
double kd_scenario_epochs (kd_scenario_t *self) { return self->epochs; }
double kd_scenario_delay_ms (kd_scenario_t *self) { return self->delay_ms; }
double kd_scenario_cap_seconds (kd_scenario_t *self) { return self->cap; }
bool kd_scenario_netns (kd_scenario_t *self) { return self->netns; }
double kd_scenario_link_delay_ms (kd_scenario_t *self) { return self->net_delay_ms; }
double kd_scenario_link_rate_mbit (kd_scenario_t *self) { return self->net_rate_mbit; }
double kd_scenario_link_loss (kd_scenario_t *self) { return self->net_loss; }
const char *kd_scenario_links (kd_scenario_t *self) { return self->net_links ? self->net_links : ""; }
size_t kd_scenario_target_count (kd_scenario_t *self) { return self->n_targets; }
double kd_scenario_target (kd_scenario_t *self) { return self->target; }
size_t kd_scenario_seed_count (kd_scenario_t *self) { return self->n_seeds; }
size_t kd_scenario_optimizer_count (kd_scenario_t *self) { return self->n_opts; }
size_t kd_scenario_model_count (kd_scenario_t *self) { return self->n_models; }

double
kd_scenario_target_at (kd_scenario_t *self, size_t index)
{
    assert (index < self->n_targets);
    return self->targets [index];
}

uint64_t
kd_scenario_seed (kd_scenario_t *self, size_t index)
{
    assert (index < self->n_seeds);
    return self->seeds [index];
}

const char *
kd_scenario_optimizer_name (kd_scenario_t *self, size_t index)
{
    assert (index < self->n_opts);
    return self->opt_name [index];
}

double
kd_scenario_optimizer_momentum (kd_scenario_t *self, size_t index)
{
    assert (index < self->n_opts);
    return self->momentum [index];
}

const char *
kd_scenario_model_name (kd_scenario_t *self, size_t index)
{
    assert (index < self->n_models);
    return self->models [index].name;
}

const char *
kd_scenario_model_consistency (kd_scenario_t *self, size_t index)
{
    assert (index < self->n_models);
    return self->models [index].consistency;
}

double
kd_scenario_model_lr (kd_scenario_t *self, size_t model, size_t optimizer)
{
    assert (model < self->n_models && optimizer < self->n_opts);
    return self->models [model].lr [optimizer];
}

size_t
kd_scenario_param_count (kd_scenario_t *self, size_t model)
{
    assert (model < self->n_models);
    return self->models [model].n_params;
}

const char *
kd_scenario_param_name (kd_scenario_t *self, size_t model, size_t index)
{
    assert (model < self->n_models && index < self->models [model].n_params);
    return self->models [model].param_name [index];
}

const char *
kd_scenario_param_value (kd_scenario_t *self, size_t model, size_t index)
{
    assert (model < self->n_models && index < self->models [model].n_params);
    return self->models [model].param_value [index];
}

int
kd_scenario_model_find (kd_scenario_t *self, const char *name)
{
    for (size_t i = 0; i < self->n_models; i++)
        if (!strcmp (self->models [i].name, name))
            return (int) i;
    return -1;
}
