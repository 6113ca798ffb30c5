/* The least a ring all_reduce over loopback TCP does, for the floor in
 * docs/PERFORMANCE.md (not part of the build; no framing, no library, no
 * error handling beyond stopping):
 *
 *   gcc -O3 -march=native -o /tmp/bare_ring tools/peers/bare_ring.c
 *   /tmp/bare_ring ring|exchange RANKS MIN MAX FACTOR ITERS WARM [SEGMENT]
 *
 * RANKS processes (fork), each with one connection to the next rank and one
 * from the previous (TCP_NODELAY; cubic, or $CC_ALGO; SO_SNDBUF from $SNDBUF if set, as
 * collie sets 384 KiB between processes of one host; with ONECONN=1 and 2
 * ranks, one connection both ways, as collie's mesh has). `ring`: reduce-scatter
 * then all-gather, float32 sum in place, pipelined across steps (a byte is
 * sent on as soon as it is reduced or received; received bytes are reduced
 * from a SEGMENT-byte staging buffer, default 256 KiB). `exchange`: the same
 * bytes with no reduce and no dependency between steps, as fast as the
 * sockets take them: what any all_reduce of that size must at least move.
 * One thread per rank, non-blocking sockets, poll() when nothing moves
 * (or, with SPIN=1, trying again at once: for ranks that each have a core;
 * PIN=1 binds rank r to processor r * m / RANKS of the m it may run on,
 * as collie's launcher places ranks).
 * Prints CSV like mpi_bench.c: the mean over ITERS after WARM, the maximum
 * across ranks; busbw by nccl-tests' all_reduce factor. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char* w) {
  perror(w);
  exit(2);
}

static void full_write(int fd, const void* p, size_t len) {
  const char* c = p;
  while (len) {
    ssize_t k = send(fd, c, len, 0);
    if (k < 0) {
      if (errno == EAGAIN || errno == EINTR) {
        struct pollfd q = {fd, POLLOUT, 0};
        poll(&q, 1, -1);
        continue;
      }
      die("send");
    }
    c += k;
    len -= (size_t)k;
  }
}

static void full_read(int fd, void* p, size_t len) {
  char* c = p;
  while (len) {
    ssize_t k = recv(fd, c, len, 0);
    if (k == 0) { fprintf(stderr, "eof\n"); exit(2); }
    if (k < 0) {
      if (errno == EAGAIN || errno == EINTR) {
        struct pollfd q = {fd, POLLIN, 0};
        poll(&q, 1, -1);
        continue;
      }
      die("recv");
    }
    c += k;
    len -= (size_t)k;
  }
}

/* One ring all_reduce of count floats in place. Stream of 2(n-1) steps of
 * chunks; step k sends chunk (r-k) mod n and receives chunk (r-k-1) mod n. */
static int n, r, nxt, prv;
static size_t seg;
static int duplex, spin;
static float* stage;

static void chunk_of(size_t count, int c, size_t* off, size_t* len) {
  size_t base = count / n, extra = count % n;
  *off = c * base + (c < (int)extra ? (size_t)c : extra);
  *len = base + (c < (int)extra);
}

static void all_reduce(float* a, size_t count) {
  if (n == 1) return;
  int steps = 2 * (n - 1);
  /* send side */
  int sk = 0;
  size_t sdone = 0; /* bytes of step sk sent */
  /* receive side */
  int rk = 0;
  size_t rdone = 0;   /* bytes of step rk received (and reduced, for RS) */
  size_t staged = 0;  /* bytes in stage not yet reduced (RS steps) */
  while (rk < steps || sk < steps) {
    int moved = 0, send_blocked = 0;
    if (sk < steps) {
      size_t off, len;
      chunk_of(count, ((r - sk) % n + n) % n, &off, &len);
      len *= 4;
      /* what is ready: step 0 all; step k>0 what step k-1 received */
      size_t ready = (sk == 0 || duplex) ? len : (rk > sk - 1 ? len : (rk == sk - 1 ? rdone : 0));
      if (ready > sdone) {
        ssize_t k = send(nxt, (char*)(a + off) + sdone, ready - sdone, MSG_DONTWAIT);
        if (k > 0) {
          sdone += (size_t)k;
          moved = 1;
        } else if (k < 0 && errno != EAGAIN) die("send");
        else send_blocked = 1;
      }
      if (sdone == len) {
        ++sk;
        sdone = 0;
        moved = 1;
      }
    }
    if (rk < steps) {
      size_t off, len;
      chunk_of(count, ((r - rk - 1) % n + n) % n, &off, &len);
      len *= 4;
      int rs = rk < n - 1 && !duplex;
      if (rdone < len) {
        char* dst;
        size_t want;
        if (rs) {
          size_t s_here = len - rdone < seg ? len - rdone : seg;
          dst = (char*)stage + staged;
          want = s_here - staged;
        } else {
          dst = (char*)(a + off) + rdone;
          want = len - rdone;
        }
        ssize_t k = recv(prv, dst, want, MSG_DONTWAIT);
        if (k > 0) {
          moved = 1;
          if (rs) {
            staged += (size_t)k;
            size_t s_here = len - rdone < seg ? len - rdone : seg;
            if (staged == s_here) {
              float* out = (float*)((char*)(a + off) + rdone);
              size_t m = s_here / 4;
              for (size_t i = 0; i < m; ++i) out[i] += stage[i];
              rdone += s_here;
              staged = 0;
            }
          } else {
            rdone += (size_t)k;
          }
        } else if (k == 0) {
          fprintf(stderr, "eof\n");
          exit(2);
        } else if (errno != EAGAIN) die("recv");
      }
      if (rdone == len) {
        ++rk;
        rdone = 0;
        moved = 1;
      }
    }
    if (!moved && !spin) {
      struct pollfd q[2] = {{nxt, POLLOUT, 0}, {prv, POLLIN, 0}};
      /* wait for POLLOUT only when a send found the socket full */
      if (rk < steps)
        poll(send_blocked ? q : q + 1, send_blocked ? 2 : 1, -1);
      else
        poll(q, 1, -1);
    }
  }
}

static void barrier(void) {
  char t = 0;
  for (int i = 0; i < 2; ++i) {
    if (r == 0) {
      full_write(nxt, &t, 1);
      full_read(prv, &t, 1);
    } else {
      full_read(prv, &t, 1);
      full_write(nxt, &t, 1);
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 2 || (strcmp(argv[1], "ring") && strcmp(argv[1], "exchange"))) {
    fprintf(stderr, "usage: %s ring|exchange RANKS MIN MAX FACTOR ITERS WARM [SEGMENT]\n", argv[0]);
    return 2;
  }
  duplex = strcmp(argv[1], "exchange") == 0;
  spin = getenv("SPIN") != NULL && atoi(getenv("SPIN")) != 0;
  n = argc > 2 ? atoi(argv[2]) : 2;
  size_t lo = argc > 3 ? strtoull(argv[3], NULL, 10) : 8;
  size_t hi = argc > 4 ? strtoull(argv[4], NULL, 10) : 64u << 20;
  size_t f = argc > 5 ? strtoull(argv[5], NULL, 10) : 2;
  int iters = argc > 6 ? atoi(argv[6]) : 20;
  int warm = argc > 7 ? atoi(argv[7]) : 5;
  seg = argc > 8 ? strtoull(argv[8], NULL, 10) : 256 * 1024;
  if (n < 1 || n > 64 || f < 2 || seg < 64 || seg % 4) {
    fprintf(stderr, "RANKS 1-64, FACTOR 2 or more, SEGMENT a multiple of 4\n");
    return 2;
  }
  int lfd[64];
  int port[64];
  for (int i = 0; i < n; ++i) {
    lfd[i] = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd[i], (struct sockaddr*)&sa, sizeof sa) || listen(lfd[i], 4)) die("bind");
    socklen_t sl = sizeof sa;
    getsockname(lfd[i], (struct sockaddr*)&sa, &sl);
    port[i] = ntohs(sa.sin_port);
  }
  int res[2];
  if (pipe(res)) die("pipe");
  for (int i = 1; i < n; ++i) {
    if (fork() == 0) {
      r = i;
      break;
    }
  }
  if (getenv("PIN") && atoi(getenv("PIN"))) {
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed)) die("sched_getaffinity");
    int k = (int)((long)r * CPU_COUNT(&allowed) / n), cpu = -1;
    while (k >= 0)
      if (CPU_ISSET(++cpu, &allowed)) --k;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one)) die("sched_setaffinity");
  }
  /* ONECONN=1 with 2 ranks: one connection carries both ways, as collie's
   * mesh does, instead of one each way. */
  const int one_conn = getenv("ONECONN") && atoi(getenv("ONECONN")) && n == 2;
  struct sockaddr_in sa = {0};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!one_conn || r == 0) {
    nxt = socket(AF_INET, SOCK_STREAM, 0);
    sa.sin_port = htons(port[(r + 1) % n]);
    if (connect(nxt, (struct sockaddr*)&sa, sizeof sa)) die("connect");
  }
  if (!one_conn || r == 1) {
    prv = accept(lfd[r], NULL, NULL);
    if (prv < 0) die("accept");
  }
  if (one_conn) {
    if (r == 0) prv = nxt;
    else nxt = prv;
  }
  int one = 1;
  setsockopt(nxt, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(prv, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (getenv("SNDBUF") && atoi(getenv("SNDBUF")) > 0) {
    int sb = atoi(getenv("SNDBUF"));
    setsockopt(nxt, SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
    setsockopt(prv, SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
  }
  const char* cc = getenv("CC_ALGO") ? getenv("CC_ALGO") : "cubic";
  setsockopt(nxt, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc));
  setsockopt(prv, IPPROTO_TCP, TCP_CONGESTION, cc, strlen(cc));
  stage = aligned_alloc(64, seg);
  if (r == 0) printf("collective,size_bytes,time_us,busbw_gbps,label\n");
  barrier(); /* settle */
  for (size_t size = lo; size <= hi; size *= f) {
    size_t count = size / 4;
    if (!count) continue;
    float* a = aligned_alloc(64, (count * 4 + 63) / 64 * 64);
    for (size_t i = 0; i < count; ++i) a[i] = 1.0f;
    double start = 0;
    for (int i = 0; i < warm + iters; ++i) {
      if (i == warm) {
        barrier();
        start = now();
      }
      all_reduce(a, count);
    }
    double t = (now() - start) / iters * 1e6;
    /* ring: once more from known values, every element checked */
    for (size_t i = 0; i < count; ++i) a[i] = (float)(r + 1 + (int)(i % 7));
    all_reduce(a, count);
    for (size_t i = 0; i < count && !duplex; ++i) {
      float expect = (float)(n * (n + 1) / 2 + n * (int)(i % 7));
      if (a[i] != expect) {
        fprintf(stderr, "rank %d: %zu bytes: element %zu is %g, not %g\n", r, count * 4, i,
                (double)a[i], (double)expect);
        exit(1);
      }
    }
    /* max across ranks: each rank writes its time; rank 0 reads n-1 */
    if (r) {
      if (write(res[1], &t, sizeof t) != sizeof t) die("write");
    } else {
      double worst = t;
      for (int i = 1; i < n; ++i) {
        double u;
        if (read(res[0], &u, sizeof u) != sizeof u) die("read");
        if (u > worst) worst = u;
      }
      printf("all_reduce,%zu,%.2f,%.4f,bare-%s\n", count * 4, worst,
             count * 4 / worst / 1e3 * 2.0 * (n - 1) / n, argv[1]);
      fflush(stdout);
    }
    barrier();
    free(a);
  }
  if (r == 0)
    while (wait(NULL) > 0) {
    }
  return 0;
}
