/*  kd_config: every setting, declared once (Redis's config table).

    The table in common/base/kd_config.c lists each setting with its type,
    default, bounds, the services that read it, and a help line.  A setting
    named "batch" is read from the environment as KUDUS_BATCH and from the
    command line as --batch VALUE (or --batch=VALUE).  Flags override the
    environment, which overrides the default.  --help is generated from the
    table.  A malformed or out-of-range value is rejected with a message
    naming the setting.
*/
#ifndef KD_CONFIG_H_INCLUDED
#define KD_CONFIG_H_INCLUDED

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Which programs read a setting (bit mask).
#define KD_SVC_SCHEDULER  0x01
#define KD_SVC_SHARD      0x02
#define KD_SVC_MONITOR    0x04
#define KD_SVC_WORKER     0x08
#define KD_SVC_LOCAL      0x10      //  kudus local / experiment
#define KD_SVC_TAIL       0x20      //  kudus tail
#define KD_SVC_EXPERIMENT 0x40      //  kudus experiment
#define KD_SVC_PERF       0x80      //  kudus bench (bench/*.c)
#define KD_SVC_DASHBOARD  0x100     //  kudus dashboard
#define KD_SVC_LINKD      0x200     //  kudus linkd (kudus local --netns)
#define KD_SVC_GENCTR     0x400     //  kudus gen-ctr
#define KD_SVC_AGGREGATOR 0x800     //  kudus aggregate (the barrier tree)
#define KD_SVC_CHAOS      0x1000    //  kudus chaos (a seeded fault schedule)
#define KD_SVC_EXPORT     0x2000    //  kudus export (a model to .pt or .npz)
#define KD_SVC_SERVICES   0x0f
#define KD_SVC_ALL        0x3fff

typedef enum {
    KD_CT_INT,          //  int64 within [min, max]
    KD_CT_DOUBLE,       //  double within [min, max]
    KD_CT_STRING,       //  any string; length <= max when max > 0
    KD_CT_BOOL,         //  0/1, true/false, yes/no, on/off
    KD_CT_ENUM,         //  one of choices, "a|b|c"
    KD_CT_LIST          //  repeatable flag; values joined with ','
} kd_config_type_t;

typedef struct {
    const char *name;           //  "batch": flag --batch, env KUDUS_BATCH
    kd_config_type_t type;      //  value type
    const char *def;            //  default, as text
    double min;                 //  lower bound (numbers)
    double max;                 //  upper bound (numbers), max length (text)
    const char *choices;        //  KD_CT_ENUM: "a|b|c"; INT/DOUBLE: words
                                //  it also takes (the getter gives NAN)
    unsigned services;          //  KD_SVC_* mask of readers
    const char *help;           //  one line for --help
} kd_setting_t;

typedef struct _kd_config_t kd_config_t;

//  A config for one program, holding the defaults of the settings it
//  reads.  Caller owns return value.
kd_config_t *
    kd_config_new (unsigned service, const char *program);

//  Destroy and null the caller's pointer.
void
    kd_config_destroy (kd_config_t **self_p);

//  Read KUDUS_* variables from the environment, then flags from argv
//  (argv[0] is skipped; arguments that do not start with "--" are kept as
//  positionals).  Returns 0, 1 when --help was given (help printed to
//  stdout), or -1 with a message in err naming the setting.
int
    kd_config_load (kd_config_t *self, int argc, char **argv,
                    char *err, size_t err_size);

//  kd_config_new plus kd_config_load for a program's main: on a bad setting
//  prints "label: message" to stderr and returns NULL with *exit_code 2; on
//  --help returns NULL with *exit_code 0.  Caller owns return value.
kd_config_t *
    kd_config_from_args (unsigned service, const char *program, const char *label,
                         int argc, char **argv, int *exit_code);

//  Set one value from text, as a flag would.  Returns 0 or -1 with err.
int
    kd_config_set (kd_config_t *self, const char *name, const char *value,
                   char *err, size_t err_size);

//  Typed getters.  Asking for a setting the program does not read, or with
//  the wrong type, is a programming error (assert).
int64_t
    kd_config_int (kd_config_t *self, const char *name);
double
    kd_config_double (kd_config_t *self, const char *name);
const char *
    kd_config_str (kd_config_t *self, const char *name);
bool
    kd_config_bool (kd_config_t *self, const char *name);

//  True when the value came from a flag or the environment.
bool
    kd_config_is_set (kd_config_t *self, const char *name);

//  Positional arguments.
int
    kd_config_positional_count (kd_config_t *self);
const char *
    kd_config_positional (kd_config_t *self, int index);

//  Print the generated help for the program.
void
    kd_config_help (kd_config_t *self, FILE *out);

//  The table itself, for documentation and tests; *count is set.
const kd_setting_t *
    kd_config_table (size_t *count);

#ifdef __cplusplus
}
#endif

#endif
