/* How fast bytes move from one processor to another through their caches on
 * this host, for tools/peers/run.sh (not part of the build):
 *
 *   cc -O2 -pthread -o /tmp/crosscore tools/peers/crosscore.c
 *   /tmp/crosscore [MIB]      prints GB/s, one line
 *
 * One thread on each of the first two processors this process may use: the
 * first copies 64 KiB chunks into a 512 KiB ring, the second copies them out
 * (MIB mebibytes in all, default 512). Every byte a loopback TCP connection
 * or a shared-memory channel carries between two ranks on different
 * processors crosses the same way, so this bounds both.
 *
 * Why run.sh needs it: on a virtual machine the hypervisor can move the
 * virtual processors apart (another L3 cache, another chiplet) and back, with
 * the guest idle or not. On the machine of docs/PERFORMANCE.md this figure
 * drops from 8-9 GB/s to about 2.2 GB/s for seconds to a minute at a time,
 * while a copy within one processor (from memory or from its cache) keeps
 * its speed. A benchmark launch that overlaps such a period measures the
 * host, not the software. Prints 0 when fewer than two processors are
 * usable. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kChunk = 64 * 1024, kSlots = 8 };

static char ring[kSlots][kChunk] __attribute__((aligned(4096)));
static char source[kChunk] __attribute__((aligned(4096)));
static char sink[kChunk] __attribute__((aligned(4096)));
static _Atomic long produced, consumed;
static long chunks;
static int cpus[2];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

static void* consume(void* unused) {
  (void)unused;
  pin(cpus[1]);
  for (long i = 0; i < chunks; i++) {
    while (atomic_load_explicit(&produced, memory_order_acquire) <= i) {
      sched_yield();
    }
    memcpy(sink, ring[i % kSlots], kChunk);
    __asm__ volatile("" : : "r"(sink) : "memory"); /* the copy is used */
    atomic_store_explicit(&consumed, i + 1, memory_order_release);
  }
  return NULL;
}

int main(int argc, char** argv) {
  long mib = argc > 1 ? atol(argv[1]) : 512;
  cpu_set_t allowed;
  int found = 0;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE && found < 2; c++) {
      if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
    }
  }
  if (found < 2 || mib <= 0) {
    printf("0\n");
    return 0;
  }
  chunks = mib * (1024 * 1024 / kChunk);
  memset(source, 1, sizeof source);
  pin(cpus[0]);
  pthread_t thread;
  double start = now();
  if (pthread_create(&thread, NULL, consume, NULL) != 0) {
    perror("pthread_create");
    return 1;
  }
  for (long i = 0; i < chunks; i++) {
    while (i - atomic_load_explicit(&consumed, memory_order_acquire) >= kSlots) {
      sched_yield();
    }
    memcpy(ring[i % kSlots], source, kChunk);
    atomic_store_explicit(&produced, i + 1, memory_order_release);
  }
  pthread_join(thread, NULL);
  printf("%.2f\n", (double)chunks * kChunk / (now() - start) / 1e9);
  return 0;
}
