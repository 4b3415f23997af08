/*  test_kd_dataset: the IDX loader, on small generated files and (when it
    is installed) on the real Fashion-MNIST test set.

    Every malformed file must come back as NULL with a message that names
    the problem; none may crash the loader.  Files are written both plain
    and gzipped, since the loader reads both through zlib.
*/
#define _GNU_SOURCE                     //  nftw is an XSI extension
#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include "kd_dataset.h"

#define FASHION_DIR "/usr/share/datasets/fashion-mnist"

#define N_ROWS  7                       //  images in the generated files
#define N_H     3                       //  image height
#define N_W     4                       //  image width
#define N_DIM   (N_H * N_W)

static char s_dir [64];                 //  this test's temporary directory

//  Fresh directory per test (Criterion runs each test in its own process).
static void
s_setup (void)
{
    snprintf (s_dir, sizeof s_dir, "/tmp/kudus-dataset-XXXXXX");
    cr_assert_not_null (mkdtemp (s_dir), "mkdtemp: %s", strerror (errno));
}

//  nftw callback that removes each entry, children first.
static int
s_remove_entry (const char *path, const struct stat *st, int flag,
                struct FTW *ftw)
{
    (void) st; (void) flag; (void) ftw;
    return remove (path);
}

//  Remove the temporary directory and everything in it.
static void
s_teardown (void)
{
    if (s_dir [0])
        nftw (s_dir, s_remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

TestSuite (kd_dataset, .init = s_setup, .fini = s_teardown);

//  Full path of a file in the temporary directory (static buffer per slot).
static const char *
s_path (const char *name)
{
    static char paths [4][256];
    static int slot = 0;
    char *path = paths [slot++ % 4];
    snprintf (path, 256, "%s/%s", s_dir, name);
    return path;
}

//  Write bytes to a file, gzipped or plain.
static void
s_write (const char *path, const void *data, size_t len, bool gz)
{
    if (gz) {
        gzFile f = gzopen (path, "wb");
        cr_assert_not_null (f);
        if (len > 0)
            cr_assert_eq (gzwrite (f, data, (unsigned) len), (int) len);
        cr_assert_eq (gzclose (f), Z_OK);
    }
    else {
        FILE *f = fopen (path, "wb");
        cr_assert_not_null (f);
        cr_assert_eq (fwrite (data, 1, len, f), len);
        cr_assert_eq (fclose (f), 0);
    }
}

//  Read a whole plain file into a malloc'd buffer.
static uint8_t *
s_slurp (const char *path, size_t *len)
{
    FILE *f = fopen (path, "rb");
    cr_assert_not_null (f);
    fseek (f, 0, SEEK_END);
    long size = ftell (f);
    fseek (f, 0, SEEK_SET);
    uint8_t *buf = (uint8_t *) malloc ((size_t) size);
    cr_assert_not_null (buf);
    cr_assert_eq (fread (buf, 1, (size_t) size, f), (size_t) size);
    fclose (f);
    *len = (size_t) size;
    return buf;
}

//  Store a big-endian 32-bit word.
static void
s_put32 (uint8_t *p, uint32_t v)
{
    p [0] = (uint8_t) (v >> 24);
    p [1] = (uint8_t) (v >> 16);
    p [2] = (uint8_t) (v >> 8);
    p [3] = (uint8_t) v;
}

//  Pixel byte of row r, position p in the generated files: covers 0..255.
static uint8_t
s_pixel (size_t r, size_t p)
{
    return (uint8_t) ((r * 37 + p * 23 + (r == 0 && p == 0 ? 255 : 0)) & 0xff);
}

//  Write an image file whose header says (magic, count, rows, cols) and
//  whose payload holds payload_rows generated rows of rows*cols pixels.
static void
s_write_images (const char *name, bool gz, uint32_t magic, uint32_t count,
                uint32_t rows, uint32_t cols, size_t payload_rows)
{
    size_t dim = (size_t) rows * cols;
    size_t len = 16 + payload_rows * dim;
    uint8_t *buf = (uint8_t *) malloc (len);
    cr_assert_not_null (buf);
    s_put32 (buf, magic);
    s_put32 (buf + 4, count);
    s_put32 (buf + 8, rows);
    s_put32 (buf + 12, cols);
    for (size_t r = 0; r < payload_rows; r++)
        for (size_t p = 0; p < dim; p++)
            buf [16 + r * dim + p] = s_pixel (r, p);
    s_write (s_path (name), buf, len, gz);
    free (buf);
}

//  Write a label file whose header says (magic, count) with payload_rows
//  labels r % 10, except that row bad_row (if below payload_rows) gets 10.
static void
s_write_labels (const char *name, bool gz, uint32_t magic, uint32_t count,
                size_t payload_rows, size_t bad_row)
{
    size_t len = 8 + payload_rows;
    uint8_t *buf = (uint8_t *) malloc (len);
    cr_assert_not_null (buf);
    s_put32 (buf, magic);
    s_put32 (buf + 4, count);
    for (size_t r = 0; r < payload_rows; r++)
        buf [8 + r] = r == bad_row ? 10 : (uint8_t) (r % 10);
    s_write (s_path (name), buf, len, gz);
    free (buf);
}

//  A valid pair of files named img/lbl.
static void
s_write_valid (const char *img, const char *lbl, bool gz)
{
    s_write_images (img, gz, 0x803, N_ROWS, N_H, N_W, N_ROWS);
    s_write_labels (lbl, gz, 0x801, N_ROWS, N_ROWS, SIZE_MAX);
}

//  Check that rows [lo, lo + count) of the generated data were loaded.
static void
s_check_rows (kd_dataset_t *ds, size_t lo, size_t count)
{
    cr_assert_eq (kd_dataset_count (ds), count);
    cr_expect_eq (kd_dataset_total (ds), N_ROWS);
    cr_assert_eq (kd_dataset_dim (ds), N_DIM);
    const float *px = kd_dataset_images (ds);
    const uint8_t *lb = kd_dataset_labels (ds);
    for (size_t r = 0; r < count; r++) {
        cr_expect_eq (lb [r], (lo + r) % 10, "label of row %zu", lo + r);
        for (size_t p = 0; p < N_DIM; p++) {
            float expect = (float) s_pixel (lo + r, p) / 255.0f;
            cr_expect_eq (px [r * N_DIM + p], expect, "row %zu pixel %zu",
                          lo + r, p);
        }
    }
}

//  Load that must fail; returns err for further checks.
static const char *
s_expect_reject (const char *img, const char *lbl, size_t lo, size_t hi,
                 const char *needle)
{
    static char err [512];
    memset (err, 0, sizeof err);
    kd_dataset_t *ds = kd_dataset_load (s_path (img), s_path (lbl), lo, hi,
                                        err, sizeof err);
    cr_expect_null (ds, "loaded %s though it is bad", img);
    kd_dataset_destroy (&ds);
    cr_expect_neq (err [0], 0, "no error message");
    if (needle)
        cr_expect_not_null (strstr (err, needle), "'%s' not in: %s", needle,
                            err);
    return err;
}


//  --------------------------------------------------------------------------
//  Valid files

Test (kd_dataset, loads_plain_and_gzip)
{
    for (int gz = 0; gz < 2; gz++) {
        s_write_valid ("img", "lbl", gz);
        char err [256] = "";
        kd_dataset_t *ds = kd_dataset_load (s_path ("img"), s_path ("lbl"),
                                            0, 0, err, sizeof err);
        cr_assert_not_null (ds, "gz=%d: %s", gz, err);
        s_check_rows (ds, 0, N_ROWS);
        //  Scaling: the first pixel is 255 -> exactly 1, and all in [0, 1].
        const float *px = kd_dataset_images (ds);
        cr_expect_eq (px [0], 1.0f);
        for (size_t i = 0; i < N_ROWS * N_DIM; i++)
            cr_expect (px [i] >= 0.0f && px [i] <= 1.0f);
        kd_dataset_destroy (&ds);
        cr_expect_null (ds);
    }
}

Test (kd_dataset, loads_row_slices)
{
    for (int gz = 0; gz < 2; gz++) {
        s_write_valid ("img", "lbl", gz);
        struct { size_t lo, hi, count; } cases [] = {
            { 2, 5, 3 }, { 3, 0, 4 }, { 0, 1, 1 }, { 6, 7, 1 }, { 6, 0, 1 },
            { 0, N_ROWS, N_ROWS }
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases [0]; c++) {
            char err [256] = "";
            kd_dataset_t *ds = kd_dataset_load (s_path ("img"), s_path ("lbl"),
                                                cases [c].lo, cases [c].hi,
                                                err, sizeof err);
            cr_assert_not_null (ds, "gz=%d [%zu,%zu): %s", gz, cases [c].lo,
                                cases [c].hi, err);
            s_check_rows (ds, cases [c].lo, cases [c].count);
            kd_dataset_destroy (&ds);
        }
    }
}

Test (kd_dataset, load_dir_prefers_gzip_and_falls_back_to_plain)
{
    s_write_valid ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                   true);
    //  A broken plain twin shows which file was picked.
    s_write (s_path ("train-images-idx3-ubyte"), "junk", 4, false);
    s_write_valid ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", false);
    char err [256] = "";
    kd_dataset_t *ds = kd_dataset_load_dir (s_dir, "train", 1, 4, err,
                                            sizeof err);
    cr_assert_not_null (ds, "%s", err);
    s_check_rows (ds, 1, 3);
    kd_dataset_destroy (&ds);
    ds = kd_dataset_load_dir (s_dir, "t10k", 0, 0, err, sizeof err);
    cr_assert_not_null (ds, "%s", err);
    s_check_rows (ds, 0, N_ROWS);
    kd_dataset_destroy (&ds);

    ds = kd_dataset_load_dir (s_dir, "valid", 0, 0, err, sizeof err);
    cr_expect_null (ds);
    cr_expect_not_null (strstr (err, "valid-images-idx3-ubyte"), "%s", err);
    cr_expect_not_null (strstr (err, strerror (ENOENT)), "%s", err);
    ds = kd_dataset_load_dir (s_dir, "", 0, 0, err, sizeof err);
    cr_expect_null (ds);
    cr_expect_neq (err [0], 0);
}


//  --------------------------------------------------------------------------
//  Malformed files

Test (kd_dataset, rejects_missing_files)
{
    s_write_valid ("img", "lbl", false);
    const char *err = s_expect_reject ("nope", "lbl", 0, 0, "nope");
    cr_expect_not_null (strstr (err, strerror (ENOENT)), "%s", err);
    err = s_expect_reject ("img", "nolabels", 0, 0, "nolabels");
    cr_expect_not_null (strstr (err, strerror (ENOENT)), "%s", err);
}

Test (kd_dataset, rejects_bad_magic)
{
    s_write_valid ("img", "lbl", false);
    //  The two files swapped, and a float-typed IDX header (0x0d).
    s_write_labels ("many", false, 0x801, 100, 100, SIZE_MAX);
    s_expect_reject ("many", "img", 0, 0, "magic");
    s_expect_reject ("img", "img", 0, 0, "magic");
    s_write_images ("f32", false, 0x0d03, N_ROWS, N_H, N_W, N_ROWS);
    s_expect_reject ("f32", "lbl", 0, 0, "magic");
}

Test (kd_dataset, rejects_truncated_image_payload)
{
    for (int gz = 0; gz < 2; gz++) {
        //  Header says 7 rows, the payload has 6 and a half.
        s_write_images ("full", gz, 0x803, N_ROWS, N_H, N_W, N_ROWS);
        s_write_labels ("lbl", gz, 0x801, N_ROWS, N_ROWS, SIZE_MAX);
        size_t len;
        uint8_t *buf;
        if (gz) {
            //  Cut the gzip stream itself: no trailer, data ends early.
            buf = s_slurp (s_path ("full"), &len);
            s_write (s_path ("img"), buf, len - 14, false);
        }
        else {
            s_write_images ("img", false, 0x803, N_ROWS, N_H, N_W, N_ROWS);
            buf = s_slurp (s_path ("img"), &len);
            s_write (s_path ("img"), buf, len - N_DIM / 2, false);
        }
        free (buf);
        s_expect_reject ("img", "lbl", 0, 0, "truncated");
        //  And a whole row missing, written as a valid gzip stream.
        s_write_images ("short", gz, 0x803, N_ROWS, N_H, N_W, N_ROWS - 1);
        s_expect_reject ("short", "lbl", 0, 0, "truncated");
    }
}

Test (kd_dataset, rejects_truncated_labels)
{
    for (int gz = 0; gz < 2; gz++) {
        s_write_images ("img", gz, 0x803, N_ROWS, N_H, N_W, N_ROWS);
        s_write_labels ("lbl", gz, 0x801, N_ROWS, N_ROWS - 2, SIZE_MAX);
        s_expect_reject ("img", "lbl", 0, 0, "truncated");
    }
}

Test (kd_dataset, rejects_truncated_header)
{
    uint8_t hdr [10] = { 0, 0, 8, 3, 0, 0, 0, 7, 0, 0 };
    s_write_valid ("img", "lbl", false);
    s_write (s_path ("short"), hdr, sizeof hdr, false);
    s_expect_reject ("short", "lbl", 0, 0, "header");
    s_write (s_path ("short"), hdr, sizeof hdr, true);
    s_expect_reject ("short", "lbl", 0, 0, "header");
    s_write (s_path ("empty"), "", 0, false);
    s_expect_reject ("empty", "lbl", 0, 0, "header");
    s_expect_reject ("img", "empty", 0, 0, "header");
}

Test (kd_dataset, rejects_count_mismatch)
{
    s_write_images ("img", false, 0x803, N_ROWS, N_H, N_W, N_ROWS);
    s_write_labels ("lbl", false, 0x801, N_ROWS - 1, N_ROWS - 1, SIZE_MAX);
    s_expect_reject ("img", "lbl", 0, 0, "count");
}

Test (kd_dataset, rejects_label_out_of_range)
{
    for (int gz = 0; gz < 2; gz++) {
        s_write_images ("img", gz, 0x803, N_ROWS, N_H, N_W, N_ROWS);
        s_write_labels ("lbl", gz, 0x801, N_ROWS, N_ROWS, 4);
        s_expect_reject ("img", "lbl", 0, 0, "label 10 at row 4");
        //  A slice that excludes the bad row is fine.
        char err [256] = "";
        kd_dataset_t *ds = kd_dataset_load (s_path ("img"), s_path ("lbl"),
                                            0, 4, err, sizeof err);
        cr_expect_not_null (ds, "%s", err);
        kd_dataset_destroy (&ds);
    }
}

Test (kd_dataset, rejects_garbage_bytes)
{
    uint8_t junk [5000];
    uint64_t x = 88172645463325252ULL;
    for (size_t i = 0; i < sizeof junk; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        junk [i] = (uint8_t) x;
    }
    s_write_valid ("img", "lbl", false);
    s_write (s_path ("junk"), junk, sizeof junk, false);
    s_expect_reject ("junk", "lbl", 0, 0, NULL);
    s_expect_reject ("img", "junk", 0, 0, NULL);
    //  Garbage that starts like a gzip stream.
    junk [0] = 0x1f;
    junk [1] = 0x8b;
    junk [2] = 8;
    s_write (s_path ("junkgz"), junk, sizeof junk, false);
    s_expect_reject ("junkgz", "lbl", 0, 0, NULL);
}

Test (kd_dataset, rejects_corrupt_gzip)
{
    //  Enough rows that the deflate stream has a body worth corrupting.
    s_write_images ("big", true, 0x803, 500, 28, 28, 500);
    s_write_labels ("lbl", true, 0x801, 500, 500, SIZE_MAX);
    size_t len;
    uint8_t *buf = s_slurp (s_path ("big"), &len);
    cr_assert_gt (len, 200);
    uint8_t *bad = (uint8_t *) malloc (len);
    cr_assert_not_null (bad);

    //  Scribble over the middle of the compressed data.
    memcpy (bad, buf, len);
    for (size_t i = len / 2; i < len / 2 + 64; i++)
        bad [i] = (uint8_t) (i * 131);
    s_write (s_path ("img"), bad, len, false);
    s_expect_reject ("img", "lbl", 0, 0, NULL);

    //  A wrong CRC in the trailer: only the end-of-stream check sees it.
    memcpy (bad, buf, len);
    bad [len - 8] ^= 0x55;
    s_write (s_path ("img"), bad, len, false);
    s_expect_reject ("img", "lbl", 0, 0, "corrupt");

    //  The header of the gzip wrapper itself damaged.
    memcpy (bad, buf, len);
    bad [3] = 0xff;                     //  reserved flag bits set
    s_write (s_path ("img"), bad, len, false);
    s_expect_reject ("img", "lbl", 0, 0, NULL);
    free (bad);
    free (buf);
}

Test (kd_dataset, rejects_bad_dimensions)
{
    s_write_labels ("lbl", false, 0x801, N_ROWS, N_ROWS, SIZE_MAX);
    s_write_images ("img", false, 0x803, N_ROWS, 0, N_W, N_ROWS);
    s_expect_reject ("img", "lbl", 0, 0, "image size");
    s_write_images ("img", false, 0x803, N_ROWS, N_H, 0, N_ROWS);
    s_expect_reject ("img", "lbl", 0, 0, "image size");
    //  65x64 = 4160 pixels is above the limit; 2^16 x 2^16 would overflow
    //  32 bits.
    s_write_images ("img", false, 0x803, N_ROWS, 65, 64, 0);
    s_expect_reject ("img", "lbl", 0, 0, "image size");
    s_write_images ("img", false, 0x803, N_ROWS, 65536, 65536, 0);
    s_expect_reject ("img", "lbl", 0, 0, "image size");
    s_write_images ("img", false, 0x803, 0, N_H, N_W, 0);
    s_expect_reject ("img", "lbl", 0, 0, "count");
    s_write_images ("img", false, 0x803, 10000001, N_H, N_W, 0);
    s_expect_reject ("img", "lbl", 0, 0, "count");
    s_write_images ("img", false, 0x803, UINT32_MAX, N_H, N_W, 0);
    s_expect_reject ("img", "lbl", 0, 0, "count");
}

Test (kd_dataset, rejects_huge_count_in_small_file)
{
    //  A plausible header over a tiny payload must not turn into a huge
    //  allocation followed by a long read.
    s_write_images ("img", false, 0x803, 10000000, 64, 64, 2);
    s_write_labels ("lbl", false, 0x801, 10000000, 2, SIZE_MAX);
    s_expect_reject ("img", "lbl", 0, 0, "truncated");
    s_write_images ("img", true, 0x803, 10000000, 1, 1, 2);
    s_write_labels ("lbl", true, 0x801, 10000000, 2, SIZE_MAX);
    s_expect_reject ("img", "lbl", 0, 0, "truncated");
}

Test (kd_dataset, rejects_trailing_bytes)
{
    s_write_images ("img", false, 0x803, N_ROWS - 1, N_H, N_W, N_ROWS);
    s_write_labels ("lbl", false, 0x801, N_ROWS - 1, N_ROWS - 1, SIZE_MAX);
    s_expect_reject ("img", "lbl", 0, 0, "longer");
}

Test (kd_dataset, rejects_bad_row_ranges)
{
    s_write_valid ("img", "lbl", true);
    s_expect_reject ("img", "lbl", 3, 3, "range");
    s_expect_reject ("img", "lbl", 4, 2, "range");
    s_expect_reject ("img", "lbl", 0, N_ROWS + 1, "range");
    s_expect_reject ("img", "lbl", N_ROWS, 0, "range");
    s_expect_reject ("img", "lbl", SIZE_MAX, 0, "range");
    s_expect_reject ("img", "lbl", 0, SIZE_MAX, "range");
}


//  --------------------------------------------------------------------------
//  The real data

Test (kd_dataset, loads_fashion_mnist_test_set)
{
    struct stat st;
    if (stat (FASHION_DIR, &st) != 0)
        cr_skip_test ("%s is not installed", FASHION_DIR);
    char err [512] = "";
    kd_dataset_t *ds = kd_dataset_load_dir (FASHION_DIR, "t10k", 0, 0, err,
                                            sizeof err);
    cr_assert_not_null (ds, "%s", err);
    cr_expect_eq (kd_dataset_count (ds), 10000);
    cr_expect_eq (kd_dataset_total (ds), 10000);
    cr_assert_eq (kd_dataset_dim (ds), 784);
    size_t classes [10] = { 0 };
    const uint8_t *lb = kd_dataset_labels (ds);
    for (size_t r = 0; r < 10000; r++) {
        cr_assert_lt (lb [r], 10);
        classes [lb [r]]++;
    }
    for (int c = 0; c < 10; c++)
        cr_expect_eq (classes [c], 1000, "class %d has %zu images", c,
                      classes [c]);
    //  A slice is the same rows as the whole.
    kd_dataset_t *tail = kd_dataset_load_dir (FASHION_DIR, "t10k", 9990, 0,
                                              err, sizeof err);
    cr_assert_not_null (tail, "%s", err);
    cr_expect_eq (kd_dataset_count (tail), 10);
    cr_expect_eq (memcmp (kd_dataset_images (tail),
                          kd_dataset_images (ds) + 9990 * 784,
                          10 * 784 * sizeof (float)), 0);
    cr_expect_eq (memcmp (kd_dataset_labels (tail), lb + 9990, 10), 0);
    kd_dataset_destroy (&tail);
    kd_dataset_destroy (&ds);
}
