/* The same sweep as `collie bench`, through MPI (Open MPI over TCP for
 * docs/PERFORMANCE.md; not part of the build):
 *
 *   mpicc -O2 -o /tmp/mpi_bench tools/peers/mpi_bench.c
 *   mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl tcp,self \
 *       --mca btl_tcp_if_include lo /tmp/mpi_bench all_reduce 8 67108864 4 20 5
 *
 * Arguments: collective min_bytes max_bytes factor iterations warmup.
 * Prints CSV (collective, size_bytes, time_us, busbw_gbps, label,
 * rank0_median_us): time is the mean over the iterations, the maximum
 * across ranks; rank0_median_us the median of rank 0's calls, each timed by
 * itself (back to back, one ends where the next begins), as collie bench
 * gives both; bus factors as nccl-tests. float32 sum, in place where MPI
 * has it. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* The middle value, the mean of the middle two of an even count (as
 * Python's statistics.median); sorts v. */
static double median(double* v, int n) {
  if (n <= 0) return 0;
  qsort(v, (size_t)n, sizeof *v, by_value);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char* c = argc > 1 ? argv[1] : "all_reduce";
  size_t lo = argc > 2 ? strtoull(argv[2], NULL, 10) : 8;
  size_t hi = argc > 3 ? strtoull(argv[3], NULL, 10) : 64u << 20;
  size_t f = argc > 4 ? strtoull(argv[4], NULL, 10) : 2;
  int iters = argc > 5 ? atoi(argv[5]) : 20;
  int warm = argc > 6 ? atoi(argv[6]) : 5;
  int blocked = strcmp(c, "all_gather") == 0 || strcmp(c, "reduce_scatter") == 0 ||
                strcmp(c, "all_to_all") == 0 || strcmp(c, "gather") == 0 ||
                strcmp(c, "scatter") == 0;
  double factor = strcmp(c, "all_reduce") == 0 ? 2.0 * (n - 1) / n
                  : (strcmp(c, "broadcast") == 0 || strcmp(c, "reduce") == 0) ? 1.0
                                                                              : (double)(n - 1) / n;
  if (rank == 0) printf("collective,size_bytes,time_us,busbw_gbps,label,rank0_median_us\n");
  double* calls = malloc(sizeof(double) * (size_t)(iters > 0 ? iters : 1));
  for (size_t size = lo; size <= hi; size *= f) {
    size_t count = size / 4 / (blocked ? (size_t)n : 1);
    if (count == 0) continue;
    float* a = malloc(count * 4 * n);
    float* b = malloc(count * 4 * n);
    for (size_t i = 0; i < count * n; ++i) a[i] = b[i] = 1.0f;
    int k = (int)count;
    double start = 0, begun = 0;
    for (int i = 0; i < warm + iters; ++i) {
      if (i == warm) {
        MPI_Barrier(MPI_COMM_WORLD);
        start = begun = MPI_Wtime();
      }
      if (!strcmp(c, "all_reduce")) MPI_Allreduce(MPI_IN_PLACE, a, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (!strcmp(c, "broadcast")) MPI_Bcast(a, k, MPI_FLOAT, 0, MPI_COMM_WORLD);
      else if (!strcmp(c, "reduce")) MPI_Reduce(rank == 0 ? MPI_IN_PLACE : a, a, k, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
      else if (!strcmp(c, "all_gather")) MPI_Allgather(a, k, MPI_FLOAT, b, k, MPI_FLOAT, MPI_COMM_WORLD);
      else if (!strcmp(c, "gather")) MPI_Gather(a, k, MPI_FLOAT, b, k, MPI_FLOAT, 0, MPI_COMM_WORLD);
      else if (!strcmp(c, "scatter")) MPI_Scatter(a, k, MPI_FLOAT, b, k, MPI_FLOAT, 0, MPI_COMM_WORLD);
      else if (!strcmp(c, "reduce_scatter")) MPI_Reduce_scatter_block(a, b, k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (!strcmp(c, "all_to_all")) MPI_Alltoall(a, k, MPI_FLOAT, b, k, MPI_FLOAT, MPI_COMM_WORLD);
      if (i >= warm) {
        const double ended = MPI_Wtime();
        calls[i - warm] = (ended - begun) * 1e6;
        begun = ended;
      }
    }
    double t = (MPI_Wtime() - start) / iters * 1e6, worst = 0;
    MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    size_t bytes = count * 4 * (blocked ? (size_t)n : 1);
    if (rank == 0)
      printf("%s,%zu,%.2f,%.4f,openmpi-tcp,%.3f\n", c, bytes, worst, bytes / worst / 1e3 * factor,
             median(calls, iters));
    free(a);
    free(b);
  }
  free(calls);
  MPI_Finalize();
  return 0;
}
