/* malloc_count.c -- a counting allocator wrapper for the benchmark harness
 * (issue 10, client cost per pair): built as a shared object and loaded with
 * LD_PRELOAD, it forwards malloc, calloc, realloc, free, posix_memalign,
 * aligned_alloc and memalign to the real ones (dlsym RTLD_NEXT) and counts, in
 * every thread, the calls that hand out a block (free not counted; realloc
 * counted). At exit it writes {"allocations":N,"frees":M,"bytes":B} to the
 * file named by MALLOC_COUNT_OUT (or to stderr). run.py runs the same program
 * for two pair counts; allocations per pair = the difference / the pairs. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_ulong n_alloc, n_free, n_bytes;

static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);

/* dlsym may itself call calloc before real_calloc is known: serve it from
 * here (such blocks are never freed through the real free). */
static char boot[4096];
static size_t boot_used;
static int resolving;

static void resolve(void) {
  if (real_malloc || resolving) return;
  resolving = 1;
  real_calloc = dlsym(RTLD_NEXT, "calloc");
  real_malloc = dlsym(RTLD_NEXT, "malloc");
  real_realloc = dlsym(RTLD_NEXT, "realloc");
  real_free = dlsym(RTLD_NEXT, "free");
  real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
  real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
  real_memalign = dlsym(RTLD_NEXT, "memalign");
  resolving = 0;
}

static int from_boot(const void *p) { return (const char *)p >= boot && (const char *)p < boot + sizeof boot; }

static void count(size_t bytes) {
  atomic_fetch_add_explicit(&n_alloc, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&n_bytes, bytes, memory_order_relaxed);
}

/* A block of the static buffer (zeroed: static storage, never reused). */
static void *boot_alloc(size_t n) {
  size_t want = (n + 15) & ~(size_t)15;
  if (boot_used + want > sizeof boot) return NULL;
  void *p = boot + boot_used;
  boot_used += want;
  return p;
}

void *malloc(size_t n) {
  resolve();
  if (!real_malloc) return boot_alloc(n); /* inside dlsym */
  count(n);
  return real_malloc(n);
}

void *calloc(size_t a, size_t b) {
  resolve();
  if (!real_calloc) return boot_alloc(a * b); /* inside dlsym */
  count(a * b);
  return real_calloc(a, b);
}

void *realloc(void *p, size_t n) {
  resolve();
  count(n);
  if (from_boot(p)) {
    void *q = real_malloc(n);
    if (q) memcpy(q, p, n < sizeof boot ? n : sizeof boot);
    return q;
  }
  return real_realloc(p, n);
}

void free(void *p) {
  if (!p || from_boot(p)) return;
  resolve();
  atomic_fetch_add_explicit(&n_free, 1, memory_order_relaxed);
  real_free(p);
}

int posix_memalign(void **out, size_t al, size_t n) {
  resolve();
  count(n);
  return real_posix_memalign(out, al, n);
}

void *aligned_alloc(size_t al, size_t n) {
  resolve();
  count(n);
  return real_aligned_alloc(al, n);
}

void *memalign(size_t al, size_t n) {
  resolve();
  count(n);
  return real_memalign(al, n);
}

__attribute__((destructor)) static void report(void) {
  char buf[160];
  int len = snprintf(buf, sizeof buf, "{\"allocations\":%lu,\"frees\":%lu,\"bytes\":%lu}\n", atomic_load(&n_alloc),
                     atomic_load(&n_free), atomic_load(&n_bytes));
  const char *path = getenv("MALLOC_COUNT_OUT");
  int fd = path ? open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644) : 2;
  if (fd < 0) return;
  if (write(fd, buf, (size_t)len) != len) { /* nothing to do at exit */
  }
  if (fd != 2) close(fd);
}
