/*  test_kd_scenario: scenario files of `kudus experiment`.

    The parser is what stands between a typo in a scenario and three hours
    of runs with the wrong settings, so every malformed case must be
    refused at load time with a message that names the field.  The speed
    resolution must pair runs: the same seed gives the same speeds whatever
    the model.
*/
#include <criterion/criterion.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "kd_scenario.h"
#include "kd_speed.h"

#ifndef KUDUS_SOURCE_DIR
#define KUDUS_SOURCE_DIR "."
#endif

TestSuite (kd_scenario);

static kd_scenario_t *
s_parse (const char *text)
{
    char err [512];
    kd_scenario_t *s = kd_scenario_parse (text, "test.json", err, sizeof err);
    cr_assert (s, "refused: %s\n%s", err, text);
    return s;
}

//  The value of a model's setting, or NULL.
static const char *
s_param (kd_scenario_t *s, const char *model, const char *name)
{
    int m = kd_scenario_model_find (s, model);
    cr_assert_geq (m, 0, "no model %s", model);
    for (size_t i = 0; i < kd_scenario_param_count (s, (size_t) m); i++)
        if (!strcmp (kd_scenario_param_name (s, (size_t) m, i), name))
            return kd_scenario_param_value (s, (size_t) m, i);
    return NULL;
}

Test (kd_scenario, minimal_file_takes_the_protocol_defaults)
{
    kd_scenario_t *s = s_parse ("{\"name\": \"tiny\", \"workers\": 4,"
                                " \"models\": [{\"name\": \"bsp\", \"lr\": 0.1}]}");
    cr_expect_str_eq (kd_scenario_name (s), "tiny");
    cr_expect_eq (kd_scenario_workers (s), 4);
    cr_expect_eq (kd_scenario_shards (s), 2);
    cr_expect_str_eq (kd_scenario_model_kind (s), "mlp");
    cr_expect_eq (kd_scenario_hidden (s), 128);
    cr_expect_eq (kd_scenario_batch (s), 32);
    cr_expect_float_eq (kd_scenario_cap_seconds (s), 180, 1e-9);
    cr_assert_eq (kd_scenario_target_count (s), 3);
    cr_expect_float_eq (kd_scenario_target_at (s, 0), 0.85, 1e-9);
    cr_expect_float_eq (kd_scenario_target_at (s, 2), 0.87, 1e-9);
    cr_expect_float_eq (kd_scenario_target (s), 0.86, 1e-9);
    cr_assert_eq (kd_scenario_seed_count (s), 3);
    cr_expect_eq (kd_scenario_seed (s, 0), 1);
    cr_assert_eq (kd_scenario_optimizer_count (s), 1);
    cr_expect_str_eq (kd_scenario_optimizer_name (s, 0), "momentum");
    cr_expect_float_eq (kd_scenario_optimizer_momentum (s, 0), 0.9, 1e-12);
    cr_assert_eq (kd_scenario_model_count (s), 1);
    cr_expect_str_eq (kd_scenario_model_consistency (s, 0), "bsp");
    cr_expect_float_eq (kd_scenario_model_lr (s, 0, 0), 0.1, 1e-12);
    cr_expect_eq (kd_scenario_param_count (s, 0), 0);
    cr_expect_eq (kd_scenario_model_find (s, "lsp"), -1);
    char **speeds = kd_scenario_speeds (s, 1);
    for (int r = 0; r < 4; r++)
        cr_expect_str_eq (speeds [r], "");
    cr_expect_null (speeds [4]);
    kd_scenario_speeds_free (&speeds);
    cr_expect_null (speeds);
    kd_scenario_destroy (&s);
    cr_expect_null (s);
}

Test (kd_scenario, full_file_with_optimizers_models_and_settings)
{
    const char *text =
        "{\"name\": \"full\", \"description\": \"x\", \"workers\": 16, \"shards\": 3,"
        " \"model\": \"softmax\", \"hidden\": 64, \"batch\": 16, \"epochs\": 2.5, \"delay_ms\": 40,"
        " \"cap_seconds\": 90, \"targets\": [0.8, 0.85], \"target\": 0.8, \"seeds\": [7, 9],"
        " \"optimizers\": [{\"name\": \"momentum\", \"momentum\": 0.9}, {\"name\": \"sgd\", \"momentum\": 0}],"
        " \"lr\": {\"momentum\": 0.05, \"sgd\": 0.5},"
        " \"models\": ["
        "  {\"name\": \"bsp\"},"
        "  {\"name\": \"backup\", \"consistency\": \"lsp\", \"quota\": -2, \"staleness\": 0},"
        "  {\"name\": \"lsp14\", \"consistency\": \"lsp\", \"quota\": 14, \"quota_ratio\": 0.5,"
        "   \"window_ms\": 20, \"lr\": 0.07},"
        "  {\"name\": \"ssp10\", \"consistency\": \"ssp\", \"staleness\": 10,"
        "   \"lr\": {\"sgd\": 0.04, \"momentum\": 0.004}},"
        "  {\"name\": \"alsp\", \"group_ratio\": 1.5, \"min_group\": 1, \"max_groups\": 3,"
        "   \"regroup_dwell\": 2}"
        " ]}";
    kd_scenario_t *s = s_parse (text);
    cr_expect_eq (kd_scenario_shards (s), 3);
    cr_expect_str_eq (kd_scenario_model_kind (s), "softmax");
    cr_expect_float_eq (kd_scenario_epochs (s), 2.5, 1e-12);
    cr_expect_float_eq (kd_scenario_delay_ms (s), 40, 1e-12);
    cr_expect_float_eq (kd_scenario_target (s), 0.8, 1e-12);
    cr_expect_eq (kd_scenario_seed (s, 1), 9);
    cr_assert_eq (kd_scenario_optimizer_count (s), 2);
    cr_expect_float_eq (kd_scenario_optimizer_momentum (s, 1), 0, 1e-12);
    cr_assert_eq (kd_scenario_model_count (s), 5);
    //  The top-level lr table, a model's number, a model's table.
    cr_expect_float_eq (kd_scenario_model_lr (s, 0, 0), 0.05, 1e-12);
    cr_expect_float_eq (kd_scenario_model_lr (s, 0, 1), 0.5, 1e-12);
    cr_expect_float_eq (kd_scenario_model_lr (s, 2, 1), 0.07, 1e-12);
    cr_expect_float_eq (kd_scenario_model_lr (s, 3, 0), 0.004, 1e-12);
    cr_expect_float_eq (kd_scenario_model_lr (s, 3, 1), 0.04, 1e-12);
    //  Settings become flags; quota -2 is N-2.
    cr_expect_str_eq (kd_scenario_model_consistency (s, 1), "lsp");
    cr_expect_str_eq (s_param (s, "backup", "quota"), "14");
    cr_expect_str_eq (s_param (s, "backup", "staleness"), "0");
    cr_expect_str_eq (s_param (s, "lsp14", "quota"), "14");
    cr_expect_str_eq (s_param (s, "lsp14", "quota-ratio"), "0.5");
    cr_expect_str_eq (s_param (s, "lsp14", "window-ms"), "20");
    cr_expect_str_eq (s_param (s, "ssp10", "staleness"), "10");
    cr_expect_str_eq (s_param (s, "alsp", "group-ratio"), "1.5");
    cr_expect_str_eq (s_param (s, "alsp", "regroup-dwell"), "2");
    cr_expect_null (s_param (s, "bsp", "staleness"));
    //  A file that names no sweep belongs to the first.
    cr_expect_str_eq (kd_scenario_sweep (s), "1");
    kd_scenario_destroy (&s);
    s = s_parse ("{\"name\": \"x\", \"sweep\": \"2\", \"workers\": 4, \"lr\": 0.1,"
                 " \"models\": [{\"name\": \"auto\"},"
                 " {\"name\": \"lsp-quota\", \"consistency\": \"lsp\", \"barrier\": \"quota\","
                 " \"barrier_slack\": 0.5}]}");
    cr_expect_str_eq (kd_scenario_sweep (s), "2");
    cr_expect_str_eq (kd_scenario_model_consistency (s, 0), "auto");
    cr_expect_str_eq (s_param (s, "lsp-quota", "barrier"), "quota");
    cr_expect_str_eq (s_param (s, "lsp-quota", "barrier-slack"), "0.5");
    kd_scenario_destroy (&s);
}

//  Ranks whose spec is exactly spec.
static int
s_count (char **speeds, const char *spec, bool *which)
{
    int n = 0;
    for (int r = 0; speeds [r]; r++) {
        bool hit = !strcmp (speeds [r], spec);
        if (which)
            which [r] = hit;
        n += hit;
    }
    return n;
}

Test (kd_scenario, random_ranks_depend_on_the_seed_alone)
{
    kd_scenario_t *s = s_parse (
        "{\"name\": \"r\", \"workers\": 16, \"models\": [{\"name\": \"bsp\", \"lr\": 0.1}],"
        " \"speeds\": {\"default\": \"noise:0.1\", \"assign\": ["
        "   {\"ranks\": \"random:2\", \"spec\": \"4\"},"
        "   {\"ranks\": [3, 5], \"spec\": \"onoff:20,0.5,2\"},"
        "   {\"ranks\": \"random:3\", \"spec\": \"seg:0-10=3\"}]}}");
    bool seen [16] = { false };
    int differ = 0;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        char **a = kd_scenario_speeds (s, seed);
        char **b = kd_scenario_speeds (s, seed);
        bool slow_a [16], slow_b [16];
        cr_expect_eq (s_count (a, "4", slow_a), 2, "seed %lu", seed);
        s_count (b, "4", slow_b);
        cr_expect_eq (memcmp (slow_a, slow_b, sizeof slow_a), 0, "seed %lu not paired", seed);
        cr_expect_eq (s_count (a, "seg:0-10=3", NULL), 3);
        cr_expect_eq (s_count (a, "noise:0.1", NULL), 16 - 2 - 2 - 3);
        //  Explicit ranks are never drawn.
        cr_expect_str_eq (a [3], "onoff:20,0.5,2");
        cr_expect_str_eq (a [5], "onoff:20,0.5,2");
        for (int r = 0; r < 16; r++)
            seen [r] |= slow_a [r];
        char **c = kd_scenario_speeds (s, seed + 100);
        bool slow_c [16];
        s_count (c, "4", slow_c);
        differ += memcmp (slow_a, slow_c, sizeof slow_a) != 0;
        kd_scenario_speeds_free (&a);
        kd_scenario_speeds_free (&b);
        kd_scenario_speeds_free (&c);
    }
    cr_expect_gt (differ, 15, "other seeds should draw other ranks");
    int ranks_seen = 0;
    for (int r = 0; r < 16; r++)
        ranks_seen += seen [r];
    cr_expect_geq (ranks_seen, 10, "20 seeds drew only %d distinct slow ranks", ranks_seen);
    cr_expect (!seen [3] && !seen [5]);
    kd_scenario_destroy (&s);
}

Test (kd_scenario, seed_placeholder_in_specs)
{
    kd_scenario_t *s = s_parse (
        "{\"name\": \"b\", \"workers\": 3, \"models\": [{\"name\": \"bsp\", \"lr\": 0.1}],"
        " \"speeds\": {\"default\": \"burst:g{seed},30,5,3\"}}");
    char **a = kd_scenario_speeds (s, 17);
    cr_expect_str_eq (a [0], "burst:g17,30,5,3");
    cr_expect_str_eq (a [2], "burst:g17,30,5,3");
    kd_scenario_speeds_free (&a);
    kd_scenario_destroy (&s);
}

Test (kd_scenario, shifting_redraws_half_the_workers)
{
    kd_scenario_t *s = s_parse (
        "{\"name\": \"sh\", \"workers\": 16, \"cap_seconds\": 180,"
        " \"models\": [{\"name\": \"bsp\", \"lr\": 0.1}],"
        " \"speeds\": {\"default\": \"noise:0.2\","
        "   \"shifting\": {\"start\": 5, \"every\": 10, \"fraction\": 0.5, \"factors\": [2, 3, 4]}}}");
    char **a = kd_scenario_speeds (s, 3);
    char **b = kd_scenario_speeds (s, 3);
    kd_speed_t *speed [16];
    for (int r = 0; r < 16; r++) {
        cr_expect_str_eq (a [r], b [r], "rank %d not paired", r);
        cr_expect (strncmp (a [r], "noise:0.2", 9) == 0, "rank %d lost its default: %s", r, a [r]);
        char err [256];
        speed [r] = kd_speed_new (a [r], 1, err, sizeof err);
        cr_assert (speed [r], "%s: %s", a [r], err);
    }
    //  At each draw exactly 8 workers draw from {2, 3, 4}; the others keep
    //  their factor.  After the initial draw 8 are slow.
    int slow0 = 0;
    for (int r = 0; r < 16; r++)
        slow0 += kd_speed_base (speed [r], 1) > 1;
    cr_expect_eq (slow0, 8);
    const double draws [] = { 5, 15, 25, 35, 175 };
    for (size_t d = 0; d < 5; d++) {
        int slow = 0;
        for (int r = 0; r < 16; r++)
            slow += kd_speed_base (speed [r], draws [d] + 1) > 1;
        cr_expect_geq (slow, 8, "after the draw at %g s only %d slow", draws [d], slow);
    }
    //  At least 3 changes by 30 s, among all workers.
    size_t changes_by_30 = 0;
    double times [64];
    for (int r = 0; r < 16; r++) {
        size_t n = kd_speed_changes (speed [r], 30, times, 64);
        for (size_t i = 0; i < n && i < 64; i++)
            changes_by_30 += times [i] > 0;
    }
    cr_expect_geq (changes_by_30, 3);
    //  No redraw at or after until (the cap).
    for (int r = 0; r < 16; r++) {
        cr_expect_float_eq (kd_speed_base (speed [r], 176), kd_speed_base (speed [r], 500), 1e-12);
        kd_speed_destroy (&speed [r]);
    }
    kd_scenario_speeds_free (&a);
    kd_scenario_speeds_free (&b);
    kd_scenario_destroy (&s);
}

Test (kd_scenario, every_shipped_scenario_parses)
{
    glob_t g;
    char pattern [512];
    snprintf (pattern, sizeof pattern, "%s/bench/scenarios/*.json", KUDUS_SOURCE_DIR);
    cr_assert_eq (glob (pattern, 0, NULL, &g), 0, "no scenarios under %s", pattern);
    const char *expected [] = { "equal", "two-slow", "six-slow", "shifting", "noisy",
                                "one-very-slow", "wide", "slow-link" };
    size_t found = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char err [512];
        kd_scenario_t *s = kd_scenario_load (g.gl_pathv [i], err, sizeof err);
        cr_expect (s, "%s", err);
        if (!s)
            continue;
        //  The file is named after the scenario.
        const char *base = strrchr (g.gl_pathv [i], '/') + 1;
        cr_expect (strncmp (base, kd_scenario_name (s), strlen (kd_scenario_name (s))) == 0,
                   "%s names itself %s", base, kd_scenario_name (s));
        for (size_t e = 0; e < 8; e++)
            found += !strcmp (kd_scenario_name (s), expected [e]);
        //  The protocol of issue 16.
        cr_expect_str_eq (kd_scenario_model_kind (s), "mlp");
        cr_expect_eq (kd_scenario_hidden (s), 128);
        cr_expect_eq (kd_scenario_batch (s), 32);
        cr_expect_float_eq (kd_scenario_cap_seconds (s), 180, 1e-9);
        cr_expect_float_eq (kd_scenario_target (s), 0.86, 1e-9);
        cr_expect_float_eq (kd_scenario_delay_ms (s), kd_scenario_workers (s) == 32 ? 80 : 40, 1e-9);
        //  The third sweep (issue 32), the second's protocol on today's
        //  defaults: every shipped scenario runs the fixed models and auto;
        //  SSP's reference is the first sweep's.
        cr_expect_str_eq (kd_scenario_sweep (s), "3", "%s", kd_scenario_name (s));
        const char *every [] = { "bsp", "asp", "backup", "lsp", "alsp", "auto" };
        for (size_t m = 0; m < 6; m++)
            cr_expect_geq (kd_scenario_model_find (s, every [m]), 0, "%s lacks %s",
                           kd_scenario_name (s), every [m]);
        bool headline = !strcmp (kd_scenario_name (s), "two-slow")
                     || !strcmp (kd_scenario_name (s), "six-slow");
        cr_expect_eq (kd_scenario_seed_count (s), headline ? 5 : 3, "%s", kd_scenario_name (s));
        //  Only slow-link spans emulated hosts.
        bool slow_link = !strcmp (kd_scenario_name (s), "slow-link");
        cr_expect_eq (kd_scenario_netns (s), slow_link, "%s", kd_scenario_name (s));
        if (slow_link) {
            cr_expect_float_eq (kd_scenario_link_rate_mbit (s), 1000, 1e-9);
            cr_expect_str_eq (kd_scenario_links (s), "worker:12-15=delay:5,rate:100");
        }
        kd_scenario_destroy (&s);
    }
    cr_expect_eq (found, 8, "found %zu of the 8 shipped scenarios", found);
    globfree (&g);
    //  Ablations (bench/scenarios/ablations/) vary one setting of a shipped
    //  scenario; they only have to parse.
    snprintf (pattern, sizeof pattern, "%s/bench/scenarios/ablations/*.json", KUDUS_SOURCE_DIR);
    cr_assert_eq (glob (pattern, 0, NULL, &g), 0, "no ablations under %s", pattern);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char err [512];
        kd_scenario_t *s = kd_scenario_load (g.gl_pathv [i], err, sizeof err);
        cr_expect (s, "%s", err);
        kd_scenario_destroy (&s);
    }
    globfree (&g);
}

Test (kd_scenario, malformed_files_are_refused_with_a_message)
{
    #define S_OK_MODELS "\"models\": [{\"name\": \"bsp\", \"lr\": 0.1}]"
    struct {
        const char *text;
        const char *needle;
    } cases [] = {
        { "", "malformed JSON" },
        { "{", "malformed JSON" },
        { "{\"name\": \"x\", \"workers\": 4,}", "malformed JSON" },
        { "{\"name\": \"x\"} trailing", "malformed JSON" },
        { "[1, 2]", "top level must be an object" },
        { "{\"workers\": 4, " S_OK_MODELS "}", "'name' is missing" },
        { "{\"name\": \"a b\", \"workers\": 4, " S_OK_MODELS "}", "may hold only" },
        { "{\"name\": \"x\", \"sweep\": \"a/b\", \"workers\": 4, " S_OK_MODELS "}", "may hold only" },
        { "{\"name\": \"x\", \"sweep\": 2, \"workers\": 4, " S_OK_MODELS "}", "must be a string" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"lsp\", \"lr\": 0.1, \"barrier\": \"soon\"}]}", "barrier" },
        { "{\"name\": \"x\", " S_OK_MODELS "}", "'workers' is missing" },
        { "{\"name\": \"x\", \"workers\": \"16\", " S_OK_MODELS "}", "'workers' must be a number" },
        { "{\"name\": \"x\", \"workers\": 2.5, " S_OK_MODELS "}", "whole number" },
        { "{\"name\": \"x\", \"workers\": 0, " S_OK_MODELS "}", "out of range" },
        { "{\"name\": \"x\", \"workers\": 4, \"batch\": true, " S_OK_MODELS "}", "'batch' must be a number" },
        { "{\"name\": \"x\", \"workers\": 4, \"model\": \"resnet\", " S_OK_MODELS "}", "'resnet' is not one of" },
        { "{\"name\": \"x\", \"workers\": 4, \"delay_ms\": -1, " S_OK_MODELS "}", "out of range" },
        { "{\"name\": \"x\", \"workers\": 4, \"wokers\": 4, " S_OK_MODELS "}", "unknown key 'wokers'" },
        { "{\"name\": \"x\", \"workers\": 4, \"network\": 5, " S_OK_MODELS "}", "'network' must be an object" },
        { "{\"name\": \"x\", \"workers\": 4, \"network\": {\"rate\": 5}, " S_OK_MODELS "}", "unknown key 'rate'" },
        { "{\"name\": \"x\", \"workers\": 4, \"network\": {\"loss\": 2}, " S_OK_MODELS "}", "out of range" },
        { "{\"name\": \"x\", \"workers\": 4, \"network\": {\"links\": [\"gpu:1=rate:5\"]}, " S_OK_MODELS "}",
          "role must be" },
        { "{\"name\": \"x\", \"workers\": 4, \"network\": {\"links\": [\"worker:1=speed:5\"]}, " S_OK_MODELS "}",
          "must be delay" },
        { "{\"name\": \"x\", \"workers\": 4, \"network\": {\"links\": [\"worker:=rate:5\"]}, " S_OK_MODELS "}",
          "ranks must be" },
        { "{\"name\": \"x\", \"workers\": 4, \"network\": {\"links\": [\"worker:3-1=rate:5\"]}, " S_OK_MODELS "}",
          "ranks must be" },
        { "{\"name\": \"x\", \"workers\": 4, \"targets\": [0.9, 0.8], " S_OK_MODELS "}", "ascending" },
        { "{\"name\": \"x\", \"workers\": 4, \"targets\": [1.5], " S_OK_MODELS "}", "not an accuracy" },
        { "{\"name\": \"x\", \"workers\": 4, \"target\": 0.9, " S_OK_MODELS "}", "not one of 'targets'" },
        { "{\"name\": \"x\", \"workers\": 4, \"seeds\": [1, -2], " S_OK_MODELS "}", "seeds[1]" },
        { "{\"name\": \"x\", \"workers\": 4, \"seeds\": [1, 1], " S_OK_MODELS "}", "listed twice" },
        { "{\"name\": \"x\", \"workers\": 4, \"seeds\": \"1,2\", " S_OK_MODELS "}", "'seeds' must be an array" },
        { "{\"name\": \"x\", \"workers\": 4}", "'models' is missing" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": []}", "1 to" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"fast\", \"lr\": 0.1}]}",
          "unknown consistency model 'fast'" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"b\", \"consistency\": \"bsq\", "
          "\"lr\": 0.1}]}", "unknown consistency model 'bsq'" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"bsp\"}]}", "no 'lr'" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"bsp\", \"lr\": \"0.1\"}]}",
          "'lr' must be a number" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"bsp\", \"lr\": {\"adam\": 0.1}}]}",
          "optimizer 'adam'" },
        { "{\"name\": \"x\", \"workers\": 4, \"optimizers\": [{\"name\": \"m\", \"momentum\": 0.9},"
          " {\"name\": \"s\", \"momentum\": 0}], \"models\": [{\"name\": \"bsp\", \"lr\": {\"m\": 0.1}}]}",
          "no value for optimizer 's'" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"bsp\", \"lr\": 0}]}", "out of range" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"bsp\", \"lr\": 0.1},"
          " {\"name\": \"bsp\", \"lr\": 0.2}]}", "listed twice" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"ssp\", \"lr\": 0.1,"
          " \"stalenes\": 3}]}", "unknown key 'stalenes'" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"ssp\", \"lr\": 0.1,"
          " \"staleness\": \"3\"}]}", "'staleness' must be a number" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"ssp\", \"lr\": 0.1,"
          " \"staleness\": 2.5}]}", "not a whole number" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"lsp\", \"lr\": 0.1,"
          " \"quota\": -4}]}", "leaves no worker" },
        { "{\"name\": \"x\", \"workers\": 4, \"models\": [{\"name\": \"lsp\", \"lr\": 0.1,"
          " \"quota_ratio\": 2}]}", "out of range" },
        { "{\"name\": \"x\", \"workers\": 4, \"optimizers\": [{\"name\": \"m\"}], " S_OK_MODELS "}",
          "'momentum' is missing" },
        { "{\"name\": \"x\", \"workers\": 4, \"optimizers\": [{\"name\": \"m\", \"momentum\": 1.5}], "
          S_OK_MODELS "}", "out of range" },
        { "{\"name\": \"x\", \"workers\": 4, \"optimizers\": {\"name\": \"m\"}, " S_OK_MODELS "}",
          "'optimizers' must be an array" },
        { "{\"name\": \"x\", \"workers\": 4, \"speeds\": [\"4\"], " S_OK_MODELS "}",
          "'speeds' must be an object" },
        { "{\"name\": \"x\", \"workers\": 4, \"speeds\": {\"default\": \"fast\"}, " S_OK_MODELS "}",
          "unknown term" },
        { "{\"name\": \"x\", \"workers\": 4, \"speeds\": {\"default\": \"-4\"}, " S_OK_MODELS "}",
          "negative" },
        { "{\"name\": \"x\", \"workers\": 4, \"speeds\": {\"assign\": [{\"ranks\": [4], \"spec\": \"2\"}]}, "
          S_OK_MODELS "}", "rank in [0, 4)" },
        { "{\"name\": \"x\", \"workers\": 4, \"speeds\": {\"assign\": [{\"ranks\": [1], \"spec\": \"2\"},"
          " {\"ranks\": [1], \"spec\": \"3\"}]}, " S_OK_MODELS "}", "assigned a speed twice" },
        { "{\"name\": \"x\", \"workers\": 4, \"speeds\": {\"assign\": [{\"ranks\": \"random:3\", \"spec\": \"2\"},"
          " {\"ranks\": [1, 2], \"spec\": \"3\"}]}, " S_OK_MODELS "}", "more than the 4 workers" },
        { "{\"name\": \"x\", \"workers\": 4, \"speeds\": {\"assign\": [{\"ranks\": \"some:2\", \"spec\": \"2\"}]}, "
          S_OK_MODELS "}", "random:K" },
        { "{\"name\": \"x\", \"workers\": 4, \"speeds\": {\"assign\": [{\"ranks\": \"random:2\"}]}, "
          S_OK_MODELS "}", "'spec' is missing" },
        { "{\"name\": \"x\", \"workers\": 4, \"speeds\": {\"assign\": [{\"ranks\": \"random:1\", \"spec\": 4}]}, "
          S_OK_MODELS "}", "'spec' must be a string" },
        { "{\"name\": \"x\", \"workers\": 4, \"speeds\": {\"shifting\": {\"start\": 5, \"every\": 0,"
          " \"factors\": [2]}}, " S_OK_MODELS "}", "'every' > 0" },
        { "{\"name\": \"x\", \"workers\": 4, \"speeds\": {\"shifting\": {\"start\": 5, \"every\": 10,"
          " \"factors\": [0]}}, " S_OK_MODELS "}", "factors[0]" },
        { "{\"name\": \"x\", \"workers\": 4, \"speeds\": {\"shifting\": {\"start\": 5, \"every\": 10}}, "
          S_OK_MODELS "}", "'factors'" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        char err [512] = "";
        kd_scenario_t *s = kd_scenario_parse (cases [i].text, "bad.json", err, sizeof err);
        cr_expect_null (s, "case %zu accepted: %s", i, cases [i].text);
        kd_scenario_destroy (&s);
        cr_expect (strstr (err, cases [i].needle), "case %zu: message '%s' lacks '%s'", i, err,
                   cases [i].needle);
        cr_expect (strncmp (err, "scenario bad.json: ", 19) == 0, "case %zu: '%s'", i, err);
    }
    //  Files: missing, and not text.
    char err [512];
    cr_expect_null (kd_scenario_load ("/nonexistent/x.json", err, sizeof err));
    cr_expect (strstr (err, "cannot read"), "%s", err);
    char path [] = "/tmp/kudus-scenario-XXXXXX";
    int fd = mkstemp (path);
    cr_assert (fd >= 0);
    cr_assert_eq (write (fd, "{\"name\"\0", 8), 8);
    close (fd);
    cr_expect_null (kd_scenario_load (path, err, sizeof err));
    cr_expect (strstr (err, "NUL"), "%s", err);
    unlink (path);
}
