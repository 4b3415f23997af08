/*  test_kd_schema: docs/protocol.md states the schema that kd_msg.c holds.

    The protocol's schema is written once, as the type table in kd_msg.c:
    direction, required and optional fields, data frame, and the roles
    that may send each type to each service.  The document says the same in
    two tables, the message table of section 5 and the role table of
    section 1.1.  Each row is parsed and compared with the schema, both
    ways, so a field added to the code and not to the document (or the
    reverse) fails here.  On a mismatch the expected row is printed.
*/
#include <criterion/criterion.h>
#include <ctype.h>
#include <string.h>
#include "kd_msg.h"
#include "kd_testutil.h"

#define S_MAX_WORDS 64

//  The document, read once per test.
static char *
s_doc (void)
{
    char path [1024];
    snprintf (path, sizeof path, "%s/docs/protocol.md", KUDUS_SOURCE_DIR);
    char *text = kd_test_slurp (path);
    cr_assert (text, "cannot read %s", path);
    return text;
}

//  Split a table row into its cells (trimmed, in place); returns the count.
static int
s_cells (char *line, char **cells, int max)
{
    int n = 0;
    char *p = line;
    if (*p == '|')
        p++;
    while (*p && n < max) {
        char *end = strchr (p, '|');
        if (end)
            *end = 0;
        while (isspace ((unsigned char) *p))
            p++;
        char *tail = p + strlen (p);
        while (tail > p && isspace ((unsigned char) tail [-1]))
            *--tail = 0;
        cells [n++] = p;
        if (!end)
            break;
        p = end + 1;
    }
    return n;
}

//  Remove every parenthesised part of text, in place.
static void
s_strip_parens (char *text)
{
    char *out = text;
    int depth = 0;
    for (char *p = text; *p; p++) {
        if (*p == '(')
            depth++;
        else
        if (*p == ')' && depth > 0)
            depth--;
        else
        if (depth == 0)
            *out++ = *p;
    }
    *out = 0;
}

//  True when the sorted word lists are the same set.
static bool
s_same_set (const char **a, size_t na, const char **b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++) {
        bool found = false;
        for (size_t j = 0; j < nb && !found; j++)
            found = !strcmp (a [i], b [j]);
        if (!found)
            return false;
    }
    return true;
}

//  The schema's row, as the document should have it.
static void
s_expected_row (kd_msg_type_t type, char *out, size_t size)
{
    const char *req [S_MAX_WORDS], *opt [S_MAX_WORDS];
    size_t nr = kd_msg_type_fields (type, true, req, S_MAX_WORDS);
    size_t no = kd_msg_type_fields (type, false, opt, S_MAX_WORDS);
    size_t len = (size_t) snprintf (out, size, "| %s | %s | ", kd_msg_type_name (type),
                                    kd_msg_type_direction (type));
    for (size_t i = 0; i < nr && len < size; i++)
        len += (size_t) snprintf (out + len, size - len, "%s%s", i ? " " : "", req [i]);
    for (size_t i = 0; i < no && len < size; i++)
        len += (size_t) snprintf (out + len, size - len, "%s%s%s", i == 0 ? (nr ? " [" : "[") : " ",
                                  opt [i], i + 1 == no ? "]" : "");
    if (nr + no == 0 && len < size)
        len += (size_t) snprintf (out + len, size - len, "-");
    if (len < size)
        snprintf (out + len, size - len, " | %s |",
                  kd_msg_type_data (type) == 1 ? "yes" : kd_msg_type_data (type) == 2 ? "optional" : "-");
}

Test (kd_schema, the_message_table_is_the_schema)
{
    char *doc = s_doc ();
    bool seen [KD_MSG_TYPE_COUNT] = { false };
    char *save = NULL;
    for (char *line = strtok_r (doc, "\n", &save); line; line = strtok_r (NULL, "\n", &save)) {
        char *cells [8];
        if (line [0] != '|')
            continue;
        int n = s_cells (line, cells, 8);
        if (n < 4)
            continue;
        int type = (int) kd_msg_type_lookup (cells [0]);
        //  The message table's rows have a direction with an arrow or
        //  "both ways"; the role table's first column is a service.
        if (type == 0 || (!strstr (cells [1], "->") && strcmp (cells [1], "both ways")))
            continue;
        cr_expect_not (seen [type], "%s has two rows", cells [0]);
        seen [type] = true;
        char expected [1024];
        s_expected_row ((kd_msg_type_t) type, expected, sizeof expected);
        cr_expect_str_eq (cells [1], kd_msg_type_direction ((kd_msg_type_t) type),
                          "%s direction; the schema says:\n%s", cells [0], expected);
        //  Fields: required plainly, optional in brackets, "-" for none.
        const char *req [S_MAX_WORDS], *opt [S_MAX_WORDS], *doc_req [S_MAX_WORDS], *doc_opt [S_MAX_WORDS];
        size_t nr = kd_msg_type_fields ((kd_msg_type_t) type, true, req, S_MAX_WORDS);
        size_t no = kd_msg_type_fields ((kd_msg_type_t) type, false, opt, S_MAX_WORDS);
        size_t ndr = 0, ndo = 0;
        bool optional = false;
        char *wsave = NULL;
        for (char *w = strtok_r (cells [2], " ", &wsave); w; w = strtok_r (NULL, " ", &wsave)) {
            if (*w == '[') {
                optional = true;
                w++;
            }
            bool closes = w [0] && w [strlen (w) - 1] == ']';
            if (closes)
                w [strlen (w) - 1] = 0;
            if (*w && strcmp (w, "-")) {
                if (optional && ndo < S_MAX_WORDS)
                    doc_opt [ndo++] = w;
                else
                if (!optional && ndr < S_MAX_WORDS)
                    doc_req [ndr++] = w;
            }
            if (closes)
                optional = false;
        }
        cr_expect (s_same_set (req, nr, doc_req, ndr), "%s required fields differ; the schema says:\n%s",
                   kd_msg_type_name ((kd_msg_type_t) type), expected);
        cr_expect (s_same_set (opt, no, doc_opt, ndo), "%s optional fields differ; the schema says:\n%s",
                   kd_msg_type_name ((kd_msg_type_t) type), expected);
        int data = !strncmp (cells [3], "yes", 3) ? 1 : !strncmp (cells [3], "optional", 8) ? 2 : 0;
        cr_expect_eq (data, kd_msg_type_data ((kd_msg_type_t) type),
                      "%s data frame; the schema says:\n%s", kd_msg_type_name ((kd_msg_type_t) type),
                      expected);
    }
    for (int t = 1; t < KD_MSG_TYPE_COUNT; t++) {
        char expected [1024];
        s_expected_row ((kd_msg_type_t) t, expected, sizeof expected);
        cr_expect (seen [t], "docs/protocol.md has no row for %s; the schema says:\n%s",
                   kd_msg_type_name ((kd_msg_type_t) t), expected);
    }
    free (doc);
}

//  The bit of a role name, 0 when it is none.
static unsigned
s_role_bit (const char *name)
{
    return !strcmp (name, "worker") ? KD_ROLE_WORKER : !strcmp (name, "shard") ? KD_ROLE_SHARD
         : !strcmp (name, "monitor") ? KD_ROLE_MONITOR : !strcmp (name, "scheduler") ? KD_ROLE_SCHEDULER
         : !strcmp (name, "evaluator") ? KD_ROLE_EVALUATOR : 0;
}

Test (kd_schema, the_role_table_is_the_schema)
{
    char *doc = s_doc ();
    unsigned doc_senders [KD_MSG_TYPE_COUNT][KD_TO_COUNT] = { { 0 } };
    int rows = 0;
    //  The role table starts at its header and ends at the first line that
    //  is not a table row.
    char *start = strstr (doc, "| service | message | roles that may send it |");
    cr_assert (start, "docs/protocol.md has no role table");
    char *save = NULL;
    for (char *line = strtok_r (start, "\n", &save); line && line [0] == '|';
         line = strtok_r (NULL, "\n", &save)) {
        char *cells [8];
        int n = s_cells (line, cells, 8);
        if (n < 3)
            continue;
        int to = !strcmp (cells [0], "scheduler") ? KD_TO_SCHEDULER : !strcmp (cells [0], "shard") ? KD_TO_SHARD
               : !strcmp (cells [0], "monitor") ? KD_TO_MONITOR : -1;
        if (to < 0)
            continue;
        s_strip_parens (cells [1]);
        s_strip_parens (cells [2]);
        unsigned roles = 0;
        char *rsave = NULL;
        for (char *r = strtok_r (cells [2], ",; ", &rsave); r; r = strtok_r (NULL, ",; ", &rsave)) {
            cr_expect_neq (s_role_bit (r), 0, "the role table names a role '%s'", r);
            roles |= s_role_bit (r);
        }
        char *msave = NULL;
        for (char *m = strtok_r (cells [1], ", ", &msave); m; m = strtok_r (NULL, ", ", &msave)) {
            int type = (int) kd_msg_type_lookup (m);
            cr_expect_neq (type, 0, "the role table names a message '%s'", m);
            if (type != 0)
                doc_senders [type][to] |= roles;
        }
        rows++;
    }
    cr_expect_gt (rows, 5, "no role table found");
    static const char *services [] = { "scheduler", "shard", "monitor" };
    for (int t = 1; t < KD_MSG_TYPE_COUNT; t++)
        for (int to = 0; to < KD_TO_COUNT; to++)
            cr_expect_eq (doc_senders [t][to], kd_msg_type_senders ((kd_msg_type_t) t, (kd_msg_to_t) to),
                          "%s to the %s: the document allows roles 0x%x, the schema 0x%x",
                          kd_msg_type_name ((kd_msg_type_t) t), services [to], doc_senders [t][to],
                          kd_msg_type_senders ((kd_msg_type_t) t, (kd_msg_to_t) to));
    free (doc);
}
