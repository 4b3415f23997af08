#define _GNU_SOURCE
/*  Criterion suite for kd_checkpoint: round trip, atomicity leftovers,
    corruption, truncation, pruning and the interval parser.
*/
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "kd_checkpoint.h"
#include <zlib.h>
#include "kd_testutil.h"

#define N 1000

static kd_checkpoint_meta_t
s_meta (uint64_t version)
{
    return (kd_checkpoint_meta_t) {
        .version = version, .samples = version * 32, .rank = 1, .lo = 500,
        .hi = 500 + N, .n_params = 7850, .kind = 0, .hidden = 0, .ts_ms = 1234,
        .n_state = 1, .opt_kind = 1, .opt_steps = version + 3
    };
}

static void
s_fill (float *p, float *v, uint64_t version)
{
    for (int i = 0; i < N; i++) {
        p [i] = (float) version + (float) i * 0.5f;
        v [i] = -(float) i;
    }
}

static void
s_write (const char *dir, uint64_t version, int keep)
{
    float p [N], v [N];
    s_fill (p, v, version);
    kd_checkpoint_meta_t meta = s_meta (version);
    char err [256];
    cr_assert_eq (kd_checkpoint_write (dir, &meta, p, v, keep, err, sizeof err), 0, "%s", err);
}

static int
s_count (const char *dir, const char *suffix)
{
    DIR *d = opendir (dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir (d)))
        if (strlen (e->d_name) > strlen (suffix)
        &&  !strcmp (e->d_name + strlen (e->d_name) - strlen (suffix), suffix))
            n++;
    closedir (d);
    return n;
}

static char *
s_path (const char *dir, uint64_t version)
{
    char *path = NULL;
    cr_assert (asprintf (&path, "%s/ckpt-%020llu.kdc", dir, (unsigned long long) version) > 0);
    return path;
}

Test (kd_checkpoint, round_trip)
{
    char *dir = kd_test_tmpdir ();
    s_write (dir, 7, 3);
    kd_checkpoint_meta_t meta;
    float *p, *v;
    char path [4096], err [256];
    cr_assert_eq (kd_checkpoint_load_latest (dir, &meta, &p, &v, path, sizeof path, err, sizeof err), 0);
    cr_assert_eq (meta.version, 7);
    cr_assert_eq (meta.samples, 7 * 32);
    cr_assert_eq (meta.lo, 500);
    cr_assert_eq (meta.hi, 500 + N);
    cr_assert_eq (meta.rank, 1);
    cr_assert_eq (meta.n_params, 7850);
    cr_assert_eq (meta.n_state, 1);
    cr_assert_eq (meta.opt_kind, 1);
    cr_assert_eq (meta.opt_steps, 10);
    float ep [N], ev [N];
    s_fill (ep, ev, 7);
    cr_assert_arr_eq (p, ep, sizeof ep);
    cr_assert_arr_eq (v, ev, sizeof ev);
    cr_assert (strstr (path, "ckpt-00000000000000000007.kdc"));
    free (p);
    free (v);
    free (dir);
}

Test (kd_checkpoint, secret_mode_and_no_temporaries_left)
{
    char *dir = kd_test_tmpdir ();
    s_write (dir, 3, 3);
    char *path = s_path (dir, 3);
    struct stat st;
    cr_assert_eq (stat (path, &st), 0);
    cr_assert_eq (st.st_mode & 0777, 0600);
    cr_assert_eq (s_count (dir, ".tmp"), 0);
    free (path);
    free (dir);
}

Test (kd_checkpoint, keeps_the_newest)
{
    char *dir = kd_test_tmpdir ();
    for (uint64_t v = 1; v <= 6; v++)
        s_write (dir, v, 2);
    cr_assert_eq (s_count (dir, ".kdc"), 2);
    kd_checkpoint_meta_t meta;
    float *p, *v;
    char err [256];
    cr_assert_eq (kd_checkpoint_load_latest (dir, &meta, &p, &v, NULL, 0, err, sizeof err), 0);
    cr_assert_eq (meta.version, 6);
    free (p);
    free (v);
    free (dir);
}

Test (kd_checkpoint, newest_corrupt_falls_back)
{
    char *dir = kd_test_tmpdir ();
    s_write (dir, 10, 3);
    s_write (dir, 11, 3);
    //  Flip one byte in the middle of the newest file's parameters.
    char *path = s_path (dir, 11);
    int fd = open (path, O_RDWR);
    cr_assert (fd >= 0);
    unsigned char b;
    cr_assert_eq (pread (fd, &b, 1, 2000), 1);
    b ^= 0x40;
    cr_assert_eq (pwrite (fd, &b, 1, 2000), 1);
    close (fd);
    float *p, *v;
    kd_checkpoint_meta_t meta;
    char err [256];
    cr_assert_eq (kd_checkpoint_read (path, &meta, &p, &v, err, sizeof err), -2);
    cr_assert (strstr (err, "CRC"), "%s", err);
    cr_assert_eq (kd_checkpoint_load_latest (dir, &meta, &p, &v, NULL, 0, err, sizeof err), 0);
    cr_assert_eq (meta.version, 10);
    free (p);
    free (v);
    free (path);
    free (dir);
}

Test (kd_checkpoint, truncated_and_half_written_are_skipped)
{
    char *dir = kd_test_tmpdir ();
    s_write (dir, 20, 3);
    s_write (dir, 21, 3);
    //  A torn file under a final name, and a temporary a killed writer left.
    char *path = s_path (dir, 21);
    cr_assert_eq (truncate (path, 128 + 1000), 0);
    char tmp [4096];
    snprintf (tmp, sizeof tmp, "%s/.ckpt-00000000000000000022-99.tmp", dir);
    FILE *f = fopen (tmp, "w");
    fputs ("KDCKPT01 half", f);
    fclose (f);
    float *p, *v;
    kd_checkpoint_meta_t meta;
    char err [256];
    cr_assert_eq (kd_checkpoint_read (path, &meta, &p, &v, err, sizeof err), -2);
    cr_assert (strstr (err, "truncated"), "%s", err);
    cr_assert_eq (kd_checkpoint_load_latest (dir, &meta, &p, &v, NULL, 0, err, sizeof err), 0);
    cr_assert_eq (meta.version, 20);
    cr_assert_eq (access (tmp, F_OK), -1, "the leftover temporary is removed");
    free (p);
    free (v);
    free (path);
    free (dir);
}

Test (kd_checkpoint, garbage_and_lies_are_malformed)
{
    char *dir = kd_test_tmpdir ();
    char *path = s_path (dir, 5);
    float *p, *v;
    kd_checkpoint_meta_t meta;
    char err [256];
    //  Not a checkpoint at all.
    FILE *f = fopen (path, "w");
    for (int i = 0; i < 300; i++)
        fputc (i * 7, f);
    fclose (f);
    cr_assert_eq (kd_checkpoint_read (path, &meta, &p, &v, err, sizeof err), -2);
    //  A valid magic whose header claims a huge range: refused before any
    //  allocation, by the size check.
    unsigned char header [128] = "KDCKPT01";
    header [40 + 7] = 0x7f;         //  hi = 0x7f00..., lo = 0
    header [48 + 7] = 0x7f;         //  n_params as large
    f = fopen (path, "w");
    fwrite (header, 1, sizeof header, f);
    fclose (f);
    cr_assert_eq (kd_checkpoint_read (path, &meta, &p, &v, err, sizeof err), -2);
    cr_assert_eq (kd_checkpoint_load_latest (dir, &meta, &p, &v, NULL, 0, err, sizeof err), 1);
    cr_assert_eq (kd_checkpoint_read ("/nonexistent/x.kdc", &meta, &p, &v, err, sizeof err), -1);
    cr_assert_eq (kd_checkpoint_load_latest ("/nonexistent", &meta, &p, &v, NULL, 0, err, sizeof err), -1);
    free (path);
    free (dir);
}

Test (kd_checkpoint, parse_every)
{
    double s;
    uint64_t v;
    cr_assert_eq (kd_checkpoint_parse_every ("30s", &s, &v), 0);
    cr_assert_float_eq (s, 30, 1e-9);
    cr_assert_eq (v, 0);
    cr_assert_eq (kd_checkpoint_parse_every ("0.5s", &s, &v), 0);
    cr_assert_float_eq (s, 0.5, 1e-9);
    cr_assert_eq (kd_checkpoint_parse_every ("200", &s, &v), 0);
    cr_assert_eq (v, 200);
    cr_assert_eq (kd_checkpoint_parse_every ("200v", &s, &v), 0);
    cr_assert_eq (v, 200);
    cr_assert_eq (kd_checkpoint_parse_every ("", &s, &v), -1);
    cr_assert_eq (kd_checkpoint_parse_every ("0", &s, &v), -1);
    cr_assert_eq (kd_checkpoint_parse_every ("-3s", &s, &v), -1);
    cr_assert_eq (kd_checkpoint_parse_every ("2.5", &s, &v), -1);
    cr_assert_eq (kd_checkpoint_parse_every ("10m", &s, &v), -1);
    cr_assert_eq (kd_checkpoint_parse_every ("abc", &s, &v), -1);
}

Test (kd_checkpoint, optimizer_state_of_zero_and_two_buffers)
{
    char *dir = kd_test_tmpdir ();
    static float p [N], st [2 * N];
    for (int i = 0; i < N; i++) {
        p [i] = (float) i;
        st [i] = 0.25f * (float) i;
        st [N + i] = -1.0f - (float) i;
    }
    kd_checkpoint_meta_t meta = s_meta (40);
    meta.n_state = 2;
    meta.opt_kind = 4;
    char err [256];
    cr_assert_eq (kd_checkpoint_write (dir, &meta, p, st, 3, err, sizeof err), 0, "%s", err);
    float *rp = NULL, *rs = NULL;
    kd_checkpoint_meta_t got;
    cr_assert_eq (kd_checkpoint_load_latest (dir, &got, &rp, &rs, NULL, 0, err, sizeof err), 0, "%s", err);
    cr_expect_eq (got.n_state, 2);
    cr_expect_eq (got.opt_kind, 4);
    cr_expect_eq (got.opt_steps, 43);
    cr_expect_arr_eq (rp, p, sizeof p);
    cr_expect_arr_eq (rs, st, sizeof st);
    free (rp);
    free (rs);
    //  Plain SGD keeps no state: no block, and none comes back.
    meta = s_meta (41);
    meta.n_state = 0;
    cr_assert_eq (kd_checkpoint_write (dir, &meta, p, NULL, 3, err, sizeof err), 0, "%s", err);
    cr_assert_eq (kd_checkpoint_load_latest (dir, &got, &rp, &rs, NULL, 0, err, sizeof err), 0, "%s", err);
    cr_expect_eq (got.version, 41);
    cr_expect_eq (got.n_state, 0);
    cr_expect_null (rs);
    free (rp);
    //  More buffers than any optimizer keeps is refused on write.
    meta.n_state = 3;
    cr_expect_eq (kd_checkpoint_write (dir, &meta, p, st, 3, err, sizeof err), -1);
    free (dir);
}

Test (kd_checkpoint, version_1_files_still_load)
{
    //  A version 1 file: magic KDCKPT01, params then one velocity buffer,
    //  no optimizer fields; written here byte by byte.
    char *dir = kd_test_tmpdir ();
    char *path = s_path (dir, 9);
    unsigned char header [128] = "KDCKPT01";
    uint64_t fields [7] = { 9, 288, 1, 0, 4, 4, 0 };   //  version samples rank lo hi n_params kind|hidden
    memcpy (header + 8, fields, sizeof fields);
    float body [8] = { 1, 2, 3, 4, -1, -2, -3, -4 };
    uLong crc = crc32 (0L, Z_NULL, 0);
    crc = crc32 (crc, header, sizeof header);
    crc = crc32 (crc, (const Bytef *) body, sizeof body);
    uint32_t c32 = (uint32_t) crc;
    FILE *f = fopen (path, "w");
    fwrite (header, 1, sizeof header, f);
    fwrite (body, 1, sizeof body, f);
    fwrite (&c32, 1, 4, f);
    fclose (f);
    float *p = NULL, *v = NULL;
    kd_checkpoint_meta_t meta;
    char err [256];
    cr_assert_eq (kd_checkpoint_read (path, &meta, &p, &v, err, sizeof err), 0, "%s", err);
    cr_expect_eq (meta.n_state, 1);
    cr_expect_eq (meta.opt_kind, 0);
    cr_expect_eq (meta.opt_steps, 9);
    cr_expect_float_eq (v [3], -4.0f, 0);
    free (p);
    free (v);
    free (path);
    free (dir);
}

Test (kd_checkpoint, too_many_state_buffers_is_malformed)
{
    char *dir = kd_test_tmpdir ();
    s_write (dir, 30, 3);
    char *path = s_path (dir, 30);
    //  Claim 3 state buffers in the header (offset 72).
    int fd = open (path, O_RDWR);
    cr_assert (fd >= 0);
    unsigned char three = 3;
    cr_assert_eq (pwrite (fd, &three, 1, 72), 1);
    close (fd);
    float *p = NULL, *v = NULL;
    kd_checkpoint_meta_t meta;
    char err [256];
    cr_assert_eq (kd_checkpoint_read (path, &meta, &p, &v, err, sizeof err), -2);
    cr_expect (strstr (err, "state"), "%s", err);
    cr_expect_null (p);
    free (path);
    free (dir);
}

Test (kd_checkpoint, the_layout_names_the_tensors)
{
    char *dir = kd_test_tmpdir ();
    //  A model of 7850 keys: W [784 x 10] and b [10]; this range is 1000.
    static float p [N], v [N];
    kd_checkpoint_meta_t meta = s_meta (50);
    meta.n_tensors = 2;
    meta.tensors [0] = (kd_tensor_t) { .name = "W", .rows = 784, .cols = 10 };
    meta.tensors [1] = (kd_tensor_t) { .name = "b", .rows = 10, .cols = 1 };
    char err [256];
    cr_assert_eq (kd_checkpoint_write (dir, &meta, p, v, 3, err, sizeof err), 0, "%s", err);
    float *rp = NULL, *rv = NULL;
    kd_checkpoint_meta_t got;
    char *path = s_path (dir, 50);
    cr_assert_eq (kd_checkpoint_read (path, &got, &rp, &rv, err, sizeof err), 0, "%s", err);
    cr_expect_eq (got.n_tensors, 2);
    cr_expect_str_eq (got.tensors [1].name, "b");
    cr_expect_eq (got.tensors [1].offset, 7840);
    cr_expect_eq (got.tensors [0].count, 7840);
    free (rp);
    free (rv);
    //  A layout whose tensors do not add up to the model is malformed: b
    //  claims 11 rows (offset 128 + 4 + 48 + 32).
    int fd = open (path, O_RDWR);
    cr_assert (fd >= 0);
    unsigned char eleven = 11;
    cr_assert_eq (pwrite (fd, &eleven, 1, 128 + 4 + 48 + 32), 1);
    close (fd);
    cr_expect_eq (kd_checkpoint_read (path, &got, &rp, &rv, err, sizeof err), -2);
    cr_expect (strstr (err, "layout"), "%s", err);
    //  More tensors than any layout holds is refused on write.
    meta.n_tensors = KD_CHECKPOINT_MAX_TENSORS + 1;
    cr_expect_eq (kd_checkpoint_write (dir, &meta, p, v, 3, err, sizeof err), -1);
    free (path);
    free (dir);
}

//  A keyed range: the touched rows' keys and rows (values and state) come
//  back as written; a key outside the range is refused.
Test (kd_checkpoint, keyed_rows_round_trip)
{
    char *dir = kd_test_tmpdir ();
    uint64_t keys [3] = { 1700, 1050, 1999 };
    float rows [3 * 2 * 2];                     //  3 rows of dim 2, 1 state buffer
    for (int i = 0; i < 12; i++)
        rows [i] = (float) i * 0.25f - 1;
    kd_checkpoint_meta_t meta = {
        .version = 42, .samples = 4200, .rank = 1, .lo = 1000, .hi = 2000, .n_params = 3000,
        .kind = 0xFFFF, .ts_ms = 99, .n_state = 1, .opt_kind = 3, .opt_steps = 41,
        .n_tensors = 1, .key_dim = 2, .key_rows = 3, .keys = keys
    };
    snprintf (meta.tensors [0].name, sizeof meta.tensors [0].name, "w");
    meta.tensors [0].rows = 3000;
    meta.tensors [0].cols = 2;
    char err [256];
    cr_assert_eq (kd_checkpoint_write (dir, &meta, rows, NULL, 3, err, sizeof err), 0, "%s", err);
    kd_checkpoint_meta_t got;
    float *rp = NULL, *rs = NULL;
    cr_assert_eq (kd_checkpoint_load_latest (dir, &got, &rp, &rs, NULL, 0, err, sizeof err), 0, "%s", err);
    cr_expect_eq (got.key_dim, 2);
    cr_expect_eq (got.key_rows, 3);
    cr_expect_eq (got.version, 42);
    cr_expect_eq (got.opt_steps, 41);
    cr_expect_eq (got.n_tensors, 1);
    cr_expect_eq (got.tensors [0].rows, 3000);
    cr_expect_null (rs);
    cr_assert_not_null (got.keys);
    cr_expect_eq (memcmp (got.keys, keys, sizeof keys), 0);
    cr_expect_eq (memcmp (rp, rows, sizeof rows), 0);
    free (rp);
    free (got.keys);
    //  No rows at all is a valid keyed checkpoint too.
    meta.version = 43;
    meta.key_rows = 0;
    cr_assert_eq (kd_checkpoint_write (dir, &meta, rows, NULL, 3, err, sizeof err), 0, "%s", err);
    cr_assert_eq (kd_checkpoint_load_latest (dir, &got, &rp, &rs, NULL, 0, err, sizeof err), 0, "%s", err);
    cr_expect_eq (got.key_rows, 0);
    cr_expect_null (got.keys);
    free (rp);
    //  A key outside [lo, hi) passes the CRC but not the range check.
    keys [1] = 2500;
    meta.version = 44;
    meta.key_rows = 3;
    cr_assert_eq (kd_checkpoint_write (dir, &meta, rows, NULL, 3, err, sizeof err), 0, "%s", err);
    char path [512];
    snprintf (path, sizeof path, "%s/ckpt-00000000000000000044.kdc", dir);
    cr_expect_eq (kd_checkpoint_read (path, &got, &rp, &rs, err, sizeof err), -2);
    cr_expect (strstr (err, "outside the range"), "%s", err);
    cr_expect_null (rp);
    //  ... and the newest valid one loads instead.
    cr_assert_eq (kd_checkpoint_load_latest (dir, &got, &rp, &rs, NULL, 0, err, sizeof err), 0, "%s", err);
    cr_expect_eq (got.version, 43);
    free (rp);
    //  A key twice is malformed too, and the newest valid one loads.
    keys [1] = 1999;
    meta.version = 45;
    cr_assert_eq (kd_checkpoint_write (dir, &meta, rows, NULL, 3, err, sizeof err), 0, "%s", err);
    snprintf (path, sizeof path, "%s/ckpt-00000000000000000045.kdc", dir);
    cr_expect_eq (kd_checkpoint_read (path, &got, &rp, &rs, err, sizeof err), -2);
    cr_expect (strstr (err, "appears twice"), "%s", err);
    cr_assert_eq (kd_checkpoint_load_latest (dir, &got, &rp, &rs, NULL, 0, err, sizeof err), 0, "%s", err);
    cr_expect_eq (got.version, 43);
    free (rp);
    free (dir);
}
