/*  kd_shm: a shared-memory region between two processes on one host.
    See kd_shm.h for the design and docs/protocol.md for the ordering.
*/
#define _GNU_SOURCE
#include "kd_shm.h"
#include "kd_log.h"
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define S_MAGIC         0x4d4853535544555Bull   //  a tag, not a secret
#define S_HEADER_BYTES  4096        //  one page before the usable bytes
#define S_SLOTS         2           //  snapshot slots
#define S_SEALS         (F_SEAL_SHRINK | F_SEAL_GROW)
#define S_TMPFS_MAGIC   0x01021994  //  memfd files live on shmem (tmpfs)
#define S_HUGETLB_MAGIC 0x958458f6  //  ... or hugetlbfs

//  One snapshot slot's seqlock, on its own cache line.
typedef struct {
    uint64_t seq;               //  odd while the owner writes the slot
    uint64_t pad [7];
} s_slot_t;

//  The first page of every region.
typedef struct {
    uint64_t magic;             //  S_MAGIC
    uint64_t token;             //  the owner's secret, sent only over ZeroMQ
    uint64_t bytes;             //  usable bytes after the header
    uint64_t floats;            //  snapshot: floats per slot (0: none)
    uint64_t pad [4];
    s_slot_t slots [S_SLOTS];
} s_header_t;

_Static_assert (sizeof (s_header_t) <= S_HEADER_BYTES, "the header fits its page");

struct _kd_shm_t {
    int fd;                     //  our descriptor of the memfd
    int pidfd;                  //  attached: the owner's pidfd (-1: none)
    pid_t owner;                //  the process that made the region
    bool attached;              //  mapped from another process
    uint8_t *base;              //  the mapping, header first
    size_t mapped;              //  bytes mapped
    size_t bytes;               //  usable bytes
    uint64_t token;             //  the header's token
    size_t slot_bytes;          //  snapshot: bytes between slots
    size_t floats;              //  snapshot owner: floats per slot
    uint64_t seqs [S_SLOTS];    //  snapshot owner: each slot's last number,
                                //  kept here, not read back from the region
    size_t next;                //  snapshot owner: the slot to write next
    dev_t dev;                  //  the region's file, to tell whether its
    ino_t ino;                  //  owner still holds it
    uint64_t remote_fd;         //  attached: the descriptor in the owner
};

static s_header_t *
s_header (kd_shm_t *self)
{
    return (s_header_t *) self->base;
}

static size_t
s_round (size_t bytes)
{
    return (bytes + KD_SHM_ALIGN - 1) / KD_SHM_ALIGN * KD_SHM_ALIGN;
}

int
kd_shm_host (char *buf, size_t size)
{
    char boot [64] = "", ns [64] = "", net [64] = "";
    FILE *f = fopen ("/proc/sys/kernel/random/boot_id", "r");
    if (!f)
        return -1;
    bool ok = fgets (boot, sizeof boot, f) != NULL;
    fclose (f);
    boot [strcspn (boot, "\n")] = 0;
    //  The network namespace too: `kudus local --netns` runs each emulated
    //  host in its own, and its links must carry the payloads.
    ssize_t len = readlink ("/proc/self/ns/pid", ns, sizeof ns - 1);
    ssize_t len_net = readlink ("/proc/self/ns/net", net, sizeof net - 1);
    if (!ok || !*boot || len <= 0 || len_net <= 0)
        return -1;
    ns [len] = 0;
    net [len_net] = 0;
    int n = snprintf (buf, size, "%s/%s/%s", boot, ns, net);
    return n > 0 && (size_t) n < size ? 0 : -1;
}

kd_shm_t *
kd_shm_new (const char *name, size_t bytes)
{
    if (bytes == 0 || bytes > KD_SHM_MAX_BYTES) {
        kd_error ("shm: cannot make a region of %zu bytes", bytes);
        return NULL;
    }
    bytes = s_round (bytes);
    int fd = memfd_create (name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        kd_error ("shm: memfd_create failed: %s", strerror (errno));
        return NULL;
    }
    size_t mapped = S_HEADER_BYTES + bytes;
    void *base = MAP_FAILED;
    if (ftruncate (fd, (off_t) mapped) || fcntl (fd, F_ADD_SEALS, S_SEALS)
    ||  (base = mmap (NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        kd_error ("shm: cannot size, seal or map a region of %zu bytes: %s", bytes, strerror (errno));
        close (fd);
        return NULL;
    }
    kd_shm_t *self = (kd_shm_t *) calloc (1, sizeof *self);
    if (!self) {
        munmap (base, mapped);
        close (fd);
        return NULL;
    }
    self->fd = fd;
    self->pidfd = -1;
    self->owner = getpid ();
    self->base = (uint8_t *) base;
    self->mapped = mapped;
    self->bytes = bytes;
    ssize_t got;
    while ((got = getrandom (&self->token, sizeof self->token, 0)) < 0 && errno == EINTR)
        ;
    if (got != (ssize_t) sizeof self->token) {
        kd_error ("shm: no random token: %s", strerror (errno));
        munmap (base, mapped);
        close (fd);
        free (self);
        return NULL;
    }
    s_header_t *h = s_header (self);
    h->token = self->token;
    h->bytes = bytes;
    __atomic_store_n (&h->magic, S_MAGIC, __ATOMIC_RELEASE);
    return self;
}

kd_shm_t *
kd_shm_new_snapshot (const char *name, size_t n)
{
    if (n == 0 || n > KD_SHM_MAX_BYTES / sizeof (float) / S_SLOTS)
        return NULL;
    size_t slot = s_round (n * sizeof (float));
    kd_shm_t *self = kd_shm_new (name, slot * S_SLOTS);
    if (self) {
        self->slot_bytes = slot;
        self->floats = n;
        s_header (self)->floats = n;
    }
    return self;
}

static int
s_pidfd_open (pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int) syscall (SYS_pidfd_open, pid, 0);
#else
    (void) pid;
    errno = ENOSYS;
    return -1;
#endif
}

kd_shm_t *
kd_shm_attach (uint64_t pid, uint64_t fd, uint64_t token, uint64_t bytes, bool writable,
               char *why, size_t why_size)
{
    if (pid == 0 || pid > INT32_MAX || fd > INT32_MAX || bytes == 0 || bytes > KD_SHM_MAX_BYTES
    ||  bytes % KD_SHM_ALIGN) {
        snprintf (why, why_size, "shm: pid %llu, fd %llu or size %llu out of range",
                  (unsigned long long) pid, (unsigned long long) fd, (unsigned long long) bytes);
        return NULL;
    }
    //  The pidfd first: it names this process even if the pid is reused
    //  later, and the token check below proves the descriptor is the one
    //  the peer meant.
    int pidfd = s_pidfd_open ((pid_t) pid);
    if (pidfd < 0 && errno != ENOSYS) {
        snprintf (why, why_size, "shm: process %llu: %s", (unsigned long long) pid, strerror (errno));
        return NULL;
    }
    //  O_PATH first: opening what a peer names could block (a FIFO, a
    //  tty, a hung mount) and stall the loop.  Only a regular file on
    //  shmem is opened for real.
    char path [64];
    snprintf (path, sizeof path, "/proc/%llu/fd/%llu", (unsigned long long) pid, (unsigned long long) fd);
    int probe = open (path, O_PATH | O_CLOEXEC);
    struct stat st;
    struct statfs sf;
    size_t mapped = S_HEADER_BYTES + (size_t) bytes;
    if (probe < 0) {
        snprintf (why, why_size, "shm: cannot open %s: %s", path, strerror (errno));
        if (pidfd >= 0)
            close (pidfd);
        return NULL;
    }
    int rfd = -1;
    if (fstat (probe, &st) || !S_ISREG (st.st_mode) || (uint64_t) st.st_size != mapped
    ||  fstatfs (probe, &sf) || (sf.f_type != S_TMPFS_MAGIC && sf.f_type != S_HUGETLB_MAGIC))
        snprintf (why, why_size, "shm: %s is not a region of %llu bytes", path, (unsigned long long) bytes);
    else {
        char again [64];
        snprintf (again, sizeof again, "/proc/self/fd/%d", probe);
        rfd = open (again, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (rfd < 0)
            snprintf (why, why_size, "shm: cannot open %s: %s", path, strerror (errno));
    }
    close (probe);
    if (rfd < 0) {
        if (pidfd >= 0)
            close (pidfd);
        return NULL;
    }
    int seals = fcntl (rfd, F_GET_SEALS);
    void *base = MAP_FAILED;
    if (fstat (rfd, &st) || !S_ISREG (st.st_mode) || (uint64_t) st.st_size != mapped)
        snprintf (why, why_size, "shm: %s is not a region of %llu bytes", path, (unsigned long long) bytes);
    else
    if (seals < 0 || (seals & S_SEALS) != S_SEALS)
        //  An unsealed file could shrink under the mapping: SIGBUS.
        snprintf (why, why_size, "shm: %s is not sealed against resizing", path);
    else
    if ((base = mmap (NULL, mapped, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, rfd, 0))
        == MAP_FAILED)
        snprintf (why, why_size, "shm: cannot map %s: %s", path, strerror (errno));
    else {
        const s_header_t *h = (const s_header_t *) base;
        if (__atomic_load_n (&h->magic, __ATOMIC_ACQUIRE) != S_MAGIC || h->token != token
        ||  h->bytes != bytes)
            snprintf (why, why_size, "shm: %s does not hold the token and size its owner sent", path);
        else {
            kd_shm_t *self = (kd_shm_t *) calloc (1, sizeof *self);
            if (self) {
                self->fd = rfd;
                self->pidfd = pidfd;
                self->owner = (pid_t) pid;
                self->attached = true;
                self->base = (uint8_t *) base;
                self->mapped = mapped;
                self->bytes = (size_t) bytes;
                self->token = token;
                self->dev = st.st_dev;
                self->remote_fd = fd;
                self->ino = st.st_ino;
                //  Slots that do not fit the region are no snapshot.
                if (h->floats && h->floats <= bytes / sizeof (float) / S_SLOTS
                &&  S_SLOTS * s_round ((size_t) h->floats * sizeof (float)) <= bytes)
                    self->slot_bytes = s_round ((size_t) h->floats * sizeof (float));
                return self;
            }
            snprintf (why, why_size, "shm: out of memory");
        }
        munmap (base, mapped);
    }
    close (rfd);
    if (pidfd >= 0)
        close (pidfd);
    return NULL;
}

void
kd_shm_destroy (kd_shm_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kd_shm_t *self = *self_p;
    munmap (self->base, self->mapped);
    close (self->fd);
    if (self->pidfd >= 0)
        close (self->pidfd);
    free (self);
    *self_p = NULL;
}

void *
kd_shm_data (kd_shm_t *self)
{
    return self->base + S_HEADER_BYTES;
}

size_t
kd_shm_size (kd_shm_t *self)
{
    return self->bytes;
}

uint64_t
kd_shm_pid (kd_shm_t *self)
{
    return (uint64_t) self->owner;
}

uint64_t
kd_shm_fd (kd_shm_t *self)
{
    return (uint64_t) self->fd;
}

uint64_t
kd_shm_token (kd_shm_t *self)
{
    return self->token;
}

bool
kd_shm_owner_gone (kd_shm_t *self)
{
    if (!self->attached)
        return false;
    if (self->pidfd >= 0) {
        //  A pidfd polls readable once its process has exited.
        struct pollfd p = { self->pidfd, POLLIN, 0 };
        return poll (&p, 1, 0) > 0;
    }
    return kill (self->owner, 0) != 0 && errno == ESRCH;
}

bool
kd_shm_orphaned (kd_shm_t *self)
{
    if (!self->attached)
        return false;
    if (kd_shm_owner_gone (self))
        return true;
    //  The owner lives, but its descriptor no longer names our file: it
    //  let go of the region (a new link, a closed client).
    char path [64];
    struct stat st;
    snprintf (path, sizeof path, "/proc/%d/fd/%llu", (int) self->owner, (unsigned long long) self->remote_fd);
    return stat (path, &st) != 0 || st.st_dev != self->dev || st.st_ino != self->ino;
}

uint64_t
kd_shm_publish (kd_shm_t *self, const float *values, size_t n, uint64_t *offset)
{
    s_header_t *h = s_header (self);
    //  Our own copies of n and the numbers: whoever else maps the region
    //  cannot steer this.
    assert (!self->attached && self->slot_bytes && n == self->floats);
    size_t k = self->next;
    self->next = (k + 1) % S_SLOTS;
    s_slot_t *slot = &h->slots [k];
    uint64_t seq = self->seqs [k];
    //  Odd while we write.  A full fence, not only a release one, keeps the
    //  odd number ahead of the values: memcpy may write large blocks with
    //  non-temporal stores, which x86 does not order behind earlier plain
    //  stores.  The release store keeps the values ahead of the even number.
    __atomic_store_n (&slot->seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence (__ATOMIC_SEQ_CST);
    memcpy (kd_shm_data (self) + k * self->slot_bytes, values, n * sizeof (float));
    __atomic_thread_fence (__ATOMIC_SEQ_CST);
    __atomic_store_n (&slot->seq, seq + 2, __ATOMIC_RELEASE);
    self->seqs [k] = seq + 2;
    *offset = k * self->slot_bytes;
    return seq + 2;
}

int
kd_shm_read (kd_shm_t *self, uint64_t offset, uint64_t seq, float *dst, size_t n)
{
    if (!self->slot_bytes || seq == 0 || seq % 2 || offset % self->slot_bytes
    ||  offset / self->slot_bytes >= S_SLOTS || n * sizeof (float) > self->slot_bytes)
        return -2;
    s_slot_t *slot = &s_header (self)->slots [offset / self->slot_bytes];
    if (__atomic_load_n (&slot->seq, __ATOMIC_ACQUIRE) != seq)
        return -1;
    memcpy (dst, (const uint8_t *) kd_shm_data (self) + offset, n * sizeof (float));
    //  The acquire fence keeps the copy ahead of the second look: a writer
    //  that started meanwhile has made the number odd or larger.
    __atomic_thread_fence (__ATOMIC_ACQUIRE);
    return __atomic_load_n (&slot->seq, __ATOMIC_RELAXED) == seq ? 0 : -1;
}
