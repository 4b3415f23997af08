/*  kd_config: defaults, environment, flags, bounds, help.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include "kd_config.h"

TestSuite (kd_config);

Test (kd_config, defaults_per_service)
{
    kd_config_t *c = kd_config_new (KD_SVC_SCHEDULER, "test");
    cr_expect_str_eq (kd_config_str (c, "bind"), "tcp://*:7000");
    cr_expect_eq (kd_config_int (c, "shards"), 2);
    cr_expect_str_eq (kd_config_str (c, "consistency"), "bsp");
    cr_expect (!kd_config_is_set (c, "shards"));
    kd_config_destroy (&c);
    cr_expect_null (c);
    c = kd_config_new (KD_SVC_SHARD, "test");
    cr_expect_str_eq (kd_config_str (c, "bind"), "tcp://*:7100");
    kd_config_destroy (&c);
    c = kd_config_new (KD_SVC_MONITOR, "test");
    cr_expect_str_eq (kd_config_str (c, "bind"), "tcp://*:7001");
    cr_expect_str_eq (kd_config_str (c, "pub-bind"), "tcp://*:7002");
    kd_config_destroy (&c);
}

Test (kd_config, flags_override_environment)
{
    setenv ("KUDUS_BATCH", "17", 1);
    setenv ("KUDUS_LR", "0.25", 1);
    kd_config_t *c = kd_config_new (KD_SVC_SCHEDULER, "test");
    char err [256];
    char *argv [] = { "prog", "--lr", "0.5", "--consistency=lsp", "--summary", "/tmp/x", NULL };
    cr_assert_eq (kd_config_load (c, 6, argv, err, sizeof err), 0, "%s", err);
    cr_expect_eq (kd_config_int (c, "batch"), 17);
    cr_expect_float_eq (kd_config_double (c, "lr"), 0.5, 1e-12);
    cr_expect_str_eq (kd_config_str (c, "consistency"), "lsp");
    cr_expect_str_eq (kd_config_str (c, "summary"), "/tmp/x");
    cr_expect (kd_config_is_set (c, "batch"));
    kd_config_destroy (&c);
    unsetenv ("KUDUS_BATCH");
    unsetenv ("KUDUS_LR");
}

Test (kd_config, rejects_bad_values_with_the_setting_name)
{
    struct { char *flag; char *value; const char *needle; } cases [] = {
        { "--shards", "0", "setting 'shards'" },
        { "--shards", "1000", "out of range" },
        { "--shards", "2.5", "whole number" },
        { "--lr", "fast", "not a number" },
        { "--lr", "nan", "not a number" },
        { "--consistency", "fastest", "not one of" },
        { "--momentum", "1.5", "setting 'momentum'" },
        { "--no-such", "1", "unknown flag '--no-such'" },
        { "--barrier-spread", "sometimes", "setting 'barrier-spread'" },
        { "--barrier-spread", "11", "out of range" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        kd_config_t *c = kd_config_new (KD_SVC_SCHEDULER, "test");
        char err [256] = "";
        char *argv [] = { "prog", cases [i].flag, cases [i].value, NULL };
        cr_expect_eq (kd_config_load (c, 3, argv, err, sizeof err), -1, "case %zu accepted", i);
        cr_expect (strstr (err, cases [i].needle), "case %zu: '%s' lacks '%s'", i, err, cases [i].needle);
        kd_config_destroy (&c);
    }
}

Test (kd_config, rejects_bad_environment)
{
    setenv ("KUDUS_HEARTBEAT_MS", "-4", 1);
    kd_config_t *c = kd_config_new (KD_SVC_SHARD, "test");
    char err [256] = "";
    char *argv [] = { "prog", NULL };
    cr_expect_eq (kd_config_load (c, 1, argv, err, sizeof err), -1);
    cr_expect (strstr (err, "KUDUS_HEARTBEAT_MS"), "%s", err);
    kd_config_destroy (&c);
    unsetenv ("KUDUS_HEARTBEAT_MS");
}

Test (kd_config, flag_needs_value_and_settings_are_per_service)
{
    kd_config_t *c = kd_config_new (KD_SVC_SHARD, "test");
    char err [256] = "";
    char *argv [] = { "prog", "--bind", NULL };
    cr_expect_eq (kd_config_load (c, 2, argv, err, sizeof err), -1);
    cr_expect (strstr (err, "needs a value"), "%s", err);
    kd_config_destroy (&c);
    //  The shard has no consistency setting.
    c = kd_config_new (KD_SVC_SHARD, "test");
    char *argv2 [] = { "prog", "--consistency", "bsp", NULL };
    cr_expect_eq (kd_config_load (c, 3, argv2, err, sizeof err), -1);
    kd_config_destroy (&c);
}

Test (kd_config, bools_lists_and_positionals)
{
    kd_config_t *c = kd_config_new (KD_SVC_TAIL, "test");
    char err [256];
    char *argv [] = { "prog", "tcp://x:1", "--json", NULL };
    cr_assert_eq (kd_config_load (c, 3, argv, err, sizeof err), 0, "%s", err);
    cr_expect (kd_config_bool (c, "json"));
    cr_expect_eq (kd_config_positional_count (c), 1);
    cr_expect_str_eq (kd_config_positional (c, 0), "tcp://x:1");
    kd_config_destroy (&c);
    c = kd_config_new (KD_SVC_LOCAL, "test");
    char *argv2 [] = { "prog", "--straggler", "1:4", "--straggler", "3:2", NULL };
    cr_assert_eq (kd_config_load (c, 5, argv2, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq (kd_config_str (c, "straggler"), "1:4,3:2");
    kd_config_destroy (&c);
}

//  A number setting that also takes a word (barrier-spread auto): the word
//  reads as NAN, a number as itself, and --help shows both.
Test (kd_config, a_number_setting_takes_its_words)
{
    kd_config_t *c = kd_config_new (KD_SVC_SCHEDULER, "test");
    char err [256] = "";
    cr_expect (isnan (kd_config_double (c, "barrier-spread")), "the default is auto");
    char *argv [] = { "prog", "--barrier-spread", "1.5", NULL };
    cr_assert_eq (kd_config_load (c, 3, argv, err, sizeof err), 0, "%s", err);
    cr_expect_eq (kd_config_double (c, "barrier-spread"), 1.5);
    char *argv2 [] = { "prog", "--barrier-spread", "auto", NULL };
    cr_assert_eq (kd_config_load (c, 3, argv2, err, sizeof err), 0, "%s", err);
    cr_expect (isnan (kd_config_double (c, "barrier-spread")));
    cr_expect_str_eq (kd_config_str (c, "barrier-spread"), "auto");
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream (&buf, &len);
    kd_config_help (c, out);
    fclose (out);
    cr_expect (strstr (buf, "[0..10] or {auto}"), "help shows the word");
    free (buf);
    kd_config_destroy (&c);
}

Test (kd_config, table_defaults_are_within_bounds_and_help_lists_all)
{
    size_t count;
    const kd_setting_t *table = kd_config_table (&count);
    cr_assert (count > 20);
    for (size_t i = 0; i < count; i++) {
        cr_expect (table [i].help && *table [i].help, "%s has no help", table [i].name);
        if (table [i].type == KD_CT_INT || table [i].type == KD_CT_DOUBLE) {
            double v = atof (table [i].def);
            cr_expect (v >= table [i].min && v <= table [i].max, "%s default out of bounds", table [i].name);
        }
    }
    kd_config_t *c = kd_config_new (KD_SVC_SCHEDULER, "kudus-scheduler");
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream (&buf, &len);
    kd_config_help (c, out);
    fclose (out);
    cr_expect (strstr (buf, "--staleness") && strstr (buf, "KUDUS_STALENESS"));
    cr_expect (strstr (buf, "--min-workers"));
    free (buf);
    kd_config_destroy (&c);
}
