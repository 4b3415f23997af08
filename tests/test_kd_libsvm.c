/*  test_kd_libsvm: the LIBSVM / SVMlight reader.

    Valid files (plain and gzipped, comments, blank lines, qid, CRLF, a last
    line without a newline) read back exactly; every kind of bad line is
    reported with its file and line number, and reading goes on after it;
    random bytes never crash the parser.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <unistd.h>
#include "kudus/kd_libsvm.h"
#include "kd_testutil.h"

TestSuite (kd_libsvm, .timeout = 60);

static char *
s_write (const char *name, const char *text, bool gzip)
{
    char *dir = kd_test_tmpdir ();
    cr_assert (dir);
    char *path = (char *) malloc (strlen (dir) + strlen (name) + 2);
    sprintf (path, "%s/%s", dir, name);
    free (dir);
    if (gzip) {
        gzFile f = gzopen (path, "wb");
        cr_assert (f);
        gzwrite (f, text, (unsigned) strlen (text));
        gzclose (f);
    }
    else {
        FILE *f = fopen (path, "wb");
        cr_assert (f);
        fwrite (text, 1, strlen (text), f);
        fclose (f);
    }
    return path;
}

static const char *s_valid =
    "# a comment line\n"
    "1 3:0.5 7:1 100:-2.25\n"
    "\n"
    "-1 qid:4 1:1e-3   2:4 # trailing comment\n"
    "+1\r\n"
    "0 18446744073709551615:7";             //  no newline at the end

static void
s_expect_valid (const char *path)
{
    char err [256] = "";
    kd_libsvm_t *r = kd_libsvm_open (path, 0, err, sizeof err);
    cr_assert (r, "%s", err);
    kd_libsvm_row_t row;
    cr_assert_eq (kd_libsvm_next (r, &row, err, sizeof err), 1, "%s", err);
    cr_expect_eq (row.label, 1.0f);
    cr_assert_eq (row.nnz, 3);
    cr_expect_eq (row.index [0], 3);
    cr_expect_eq (row.index [2], 100);
    cr_expect_eq (row.value [0], 0.5f);
    cr_expect_eq (row.value [2], -2.25f);
    cr_expect_eq (row.line, 2);
    cr_assert_eq (kd_libsvm_next (r, &row, err, sizeof err), 1, "%s", err);
    cr_expect_eq (row.label, -1.0f);
    cr_assert_eq (row.nnz, 2, "qid is not an entry");
    cr_expect_float_eq (row.value [0], 1e-3f, 1e-9);
    cr_expect_eq (row.line, 4);
    cr_assert_eq (kd_libsvm_next (r, &row, err, sizeof err), 1, "%s", err);
    cr_expect_eq (row.label, 1.0f);
    cr_expect_eq (row.nnz, 0);
    cr_assert_eq (kd_libsvm_next (r, &row, err, sizeof err), 1, "%s", err);
    cr_expect_eq (row.label, 0.0f);
    cr_assert_eq (row.nnz, 1);
    cr_expect_eq (row.index [0], UINT64_MAX);
    cr_expect_eq (row.line, 6);
    cr_expect_eq (kd_libsvm_next (r, &row, err, sizeof err), 0);
    cr_expect_eq (kd_libsvm_next (r, &row, err, sizeof err), 0, "the end stays the end");
    kd_libsvm_destroy (&r);
    cr_expect_null (r);
}

Test (kd_libsvm, plain_and_gzipped_files_read_back_exactly)
{
    char *plain = s_write ("plain.svm", s_valid, false);
    char *gz = s_write ("data.svm.gz", s_valid, true);
    s_expect_valid (plain);
    s_expect_valid (gz);
    free (plain);
    free (gz);
}

Test (kd_libsvm, every_bad_line_is_named_and_reading_goes_on)
{
    struct {
        const char *line, *reason;
    } bad [] = {
        { "x 1:1", "label is not a finite number" },
        { "nan 1:1", "label is not a finite number" },
        { "1 1:inf", "value is not a finite number" },
        { "1 1:nan", "value is not a finite number" },
        { "1 1:1e999", "value is not a finite number" },
        { "1 1:", "value is not a finite number" },
        { "1 1:2x", "value is not a finite number" },
        { "1 a:1", "expected index:value" },
        { "1 -3:1", "expected index:value" },
        { "1 5", "expected index:value" },
        { "1 18446744073709551616:1", "expected index:value" },
        { "1 5:1 5:2", "indices not in increasing order" },
        { "1 5:1 4:2", "indices not in increasing order" },
        { "1 2000:1", "over the largest" },
        { "1 qid:x 1:1", "qid is not a decimal integer" },
        { "1 1:1\x01", "value is not a finite number" },
    };
    size_t n = sizeof bad / sizeof bad [0];
    //  Each bad line between two good ones.
    size_t size = 64;
    for (size_t i = 0; i < n; i++)
        size += strlen (bad [i].line) + 16;
    char *text = (char *) calloc (1, size);
    for (size_t i = 0; i < n; i++)
        sprintf (text + strlen (text), "1 1:1\n%s\n", bad [i].line);
    strcat (text, "1 1:1\n");
    char *path = s_write ("bad.svm", text, false);
    char err [256];
    kd_libsvm_t *r = kd_libsvm_open (path, 1000, err, sizeof err);
    cr_assert (r, "%s", err);
    kd_libsvm_row_t row;
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq (kd_libsvm_next (r, &row, err, sizeof err), 1, "good line %zu: %s", i, err);
        cr_assert_eq (row.line, 2 * i + 1);
        err [0] = 0;
        cr_expect_eq (kd_libsvm_next (r, &row, err, sizeof err), -2, "'%s' was accepted", bad [i].line);
        char where [64];
        snprintf (where, sizeof where, "bad.svm:%zu: ", 2 * i + 2);
        cr_expect (strstr (err, where) && strstr (err, bad [i].reason),
                   "'%s': got \"%s\", want \"%s\" and \"%s\"", bad [i].line, err, where, bad [i].reason);
    }
    cr_expect_eq (kd_libsvm_next (r, &row, err, sizeof err), 1);
    cr_expect_eq (kd_libsvm_next (r, &row, err, sizeof err), 0);
    kd_libsvm_destroy (&r);
    free (text);
    free (path);
}

Test (kd_libsvm, a_nul_byte_and_an_overlong_line_are_errors_not_crashes)
{
    //  "1 1:1\n1 2:\0\n" then a line longer than the limit, then a good one.
    size_t long_len = KD_LIBSVM_MAX_LINE + 100;
    size_t size = 32 + long_len + 32;
    char *text = (char *) malloc (size);
    size_t at = 0;
    memcpy (text + at, "1 1:1\n1 2:", 10);
    at += 10;
    text [at++] = 0;
    text [at++] = '\n';
    text [at++] = '1';
    for (size_t i = 0; i < long_len; i++)
        text [at++] = ' ';
    text [at++] = '\n';
    memcpy (text + at, "0 9:9\n", 6);
    at += 6;
    char *dir = kd_test_tmpdir ();
    char path [512];
    snprintf (path, sizeof path, "%s/nul.svm", dir);
    FILE *f = fopen (path, "wb");
    cr_assert (f);
    fwrite (text, 1, at, f);
    fclose (f);
    char err [256];
    kd_libsvm_t *r = kd_libsvm_open (path, 0, err, sizeof err);
    cr_assert (r);
    kd_libsvm_row_t row;
    cr_expect_eq (kd_libsvm_next (r, &row, err, sizeof err), 1);
    cr_expect_eq (kd_libsvm_next (r, &row, err, sizeof err), -2);
    cr_expect (strstr (err, ":2: NUL byte"), "%s", err);
    cr_expect_eq (kd_libsvm_next (r, &row, err, sizeof err), -2);
    cr_expect (strstr (err, ":3: line longer than"), "%s", err);
    cr_assert_eq (kd_libsvm_next (r, &row, err, sizeof err), 1, "%s", err);
    cr_expect_eq (row.line, 4);
    cr_expect_eq (row.index [0], 9);
    cr_expect_eq (kd_libsvm_next (r, &row, err, sizeof err), 0);
    kd_libsvm_destroy (&r);
    free (text);
    free (dir);
}

Test (kd_libsvm, a_missing_file_is_named)
{
    char err [256];
    cr_expect_null (kd_libsvm_open ("/nonexistent/train.svm", 0, err, sizeof err));
    cr_expect (strstr (err, "/nonexistent/train.svm"), "%s", err);
    cr_expect_null (kd_libsvm_open ("", 0, err, sizeof err));
}

Test (kd_libsvm, random_bytes_never_crash_the_parser)
{
    kd_libsvm_t *r = kd_libsvm_new (0);
    cr_assert (r);
    unsigned seed = 3;
    const char alphabet [] = "0123456789:. +-eE#qid\t\rxn";
    char line [256];
    int rows = 0, blank = 0, errors = 0;
    for (int i = 0; i < 20000; i++) {
        size_t len = (size_t) rand_r (&seed) % sizeof line;
        for (size_t j = 0; j < len; j++)
            line [j] = i % 4 == 0 ? (char) rand_r (&seed)
                                  : alphabet [rand_r (&seed) % (sizeof alphabet - 1)];
        kd_libsvm_row_t row;
        char err [256];
        int rc = kd_libsvm_parse (r, line, len, &row, err, sizeof err);
        cr_assert (rc == 1 || rc == 0 || rc == -2);
        if (rc == 1) {
            rows++;
            cr_assert (isfinite (row.label));
            for (size_t k = 1; k < row.nnz; k++)
                cr_assert_gt (row.index [k], row.index [k - 1]);
        }
        blank += rc == 0;
        errors += rc == -2;
    }
    cr_expect_gt (rows, 100);
    cr_expect_gt (errors, 100);
    kd_libsvm_destroy (&r);
}

Test (kd_libsvm, a_truncated_gzip_file_is_an_error_not_a_short_row)
{
    //  Many rows, gzipped, then cut in the middle of the stream.
    size_t size = 200000;
    char *text = (char *) malloc (size + 64);
    size_t at = 0;
    for (int i = 0; at + 32 < size; i++)
        at += (size_t) sprintf (text + at, "%d %d:0.123456 %d:1\n", i % 2, i % 50 + 1, i % 50 + 60);
    char *path = s_write ("cut.svm.gz", text, true);
    FILE *f = fopen (path, "r+b");
    cr_assert (f);
    fseek (f, 0, SEEK_END);
    long full = ftell (f);
    cr_assert_eq (ftruncate (fileno (f), full / 2), 0);
    fclose (f);
    char err [256];
    kd_libsvm_t *r = kd_libsvm_open (path, 0, err, sizeof err);
    cr_assert (r);
    kd_libsvm_row_t row;
    int rc, rows = 0;
    while ((rc = kd_libsvm_next (r, &row, err, sizeof err)) == 1)
        rows++;
    cr_expect_eq (rc, -1, "a cut file read as complete after %d rows", rows);
    cr_expect (strstr (err, "cut.svm.gz") && strstr (err, "cannot read"), "%s", err);
    kd_libsvm_destroy (&r);
    free (text);
    free (path);
}
