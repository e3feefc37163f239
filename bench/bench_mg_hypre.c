/* hetmem-bench-mg-hypre: hypre's structured multigrid (PFMG) on hetmem-mg's problem, for
 * `hetmem bench mg`: the same cell-centred 7-point operator -(p_xx + p_yy + (kappa(z) p_z)_z) with
 * kappa(z) = 1 + v sin(2 pi z), homogeneous Dirichlet faces (ghost = -p, as hetmem-mg), the same
 * right-hand side, solved from zero to the same relative residual.
 *
 *   hetmem-bench-mg-hypre N TOL VARIATION RELAX PRE POST
 *
 * RELAX is PFMG's relaxation (0 Jacobi, 1 weighted Jacobi, 2 red-black Gauss-Seidel symmetric,
 * 3 red-black non-symmetric). Prints one JSON object: setup and solve seconds, cycles, the final
 * relative residual and max|p - p_exact| (the discretisation error, equal to hetmem-mg's when both
 * solve the same equations). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "HYPRE_struct_ls.h"

static double now(void) { return MPI_Wtime(); }

static double kappa(double z, double v) { return 1.0 + v * sin(2 * M_PI * z); }

static double source(double x, double y, double z, double v) {
  const double a = M_PI, sxy = sin(a * x) * sin(a * y);
  return 2 * a * a * sxy * sin(a * z) + kappa(z, v) * a * a * sxy * sin(a * z) -
         (2 * M_PI * v * cos(2 * M_PI * z)) * a * cos(a * z) * sxy;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--version") == 0) {
    printf("hetmem-bench-mg-hypre %s\n", HM_VERSION_STRING);
    return 0;
  }
  MPI_Init(&argc, &argv);
  if (argc != 7) {
    fprintf(stderr, "usage: hetmem-bench-mg-hypre N TOL VARIATION RELAX PRE POST\n");
    MPI_Finalize();
    return 2;
  }
  const int n = atoi(argv[1]), relax = atoi(argv[4]), pre = atoi(argv[5]), post = atoi(argv[6]);
  const double tol = atof(argv[2]), v = atof(argv[3]), h = 1.0 / n, ih2 = 1.0 / (h * h);
  if (n < 4 || !(tol > 0)) {
    fprintf(stderr, "hetmem-bench-mg-hypre: N >= 4 and TOL > 0\n");
    MPI_Finalize();
    return 2;
  }
  HYPRE_Init();
  const double t0 = now();
  HYPRE_StructGrid grid;
  int lower[3] = {0, 0, 0}, upper[3] = {n - 1, n - 1, n - 1};
  HYPRE_StructGridCreate(MPI_COMM_WORLD, 3, &grid);
  HYPRE_StructGridSetExtents(grid, lower, upper);
  HYPRE_StructGridAssemble(grid);
  HYPRE_StructStencil stencil;
  int offsets[7][3] = {{0, 0, 0}, {-1, 0, 0}, {1, 0, 0}, {0, -1, 0}, {0, 1, 0}, {0, 0, -1}, {0, 0, 1}};
  HYPRE_StructStencilCreate(3, 7, &stencil);
  for (int e = 0; e < 7; ++e) HYPRE_StructStencilSetElement(stencil, e, offsets[e]);
  HYPRE_StructMatrix A;
  HYPRE_StructVector b, x;
  HYPRE_StructMatrixCreate(MPI_COMM_WORLD, grid, stencil, &A);
  HYPRE_StructMatrixSetSymmetric(A, 0);
  HYPRE_StructMatrixInitialize(A);
  HYPRE_StructVectorCreate(MPI_COMM_WORLD, grid, &b);
  HYPRE_StructVectorCreate(MPI_COMM_WORLD, grid, &x);
  HYPRE_StructVectorInitialize(b);
  HYPRE_StructVectorInitialize(x);
  const size_t cells = (size_t)n * n * n;
  double *values = malloc(7 * cells * sizeof(double)), *rhs = malloc(cells * sizeof(double)),
         *zero = calloc(cells, sizeof(double));
  int entries[7] = {0, 1, 2, 3, 4, 5, 6};
  size_t c = 0;
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < n; ++i, ++c) {
        const double ku = kappa((k + 1) * h, v), kd = kappa(k * h, v);
        double coef[7] = {0, ih2, ih2, ih2, ih2, kd * ih2, ku * ih2};
        const int at_face[7] = {0, i == 0, i == n - 1, j == 0, j == n - 1, k == 0, k == n - 1};
        double diag = 0;
        for (int e = 1; e < 7; ++e) {
          diag += coef[e] * (at_face[e] ? 2 : 1);  /* a ghost -p at a face adds its coefficient */
          values[7 * c + e] = at_face[e] ? 0 : -coef[e];
        }
        values[7 * c] = diag;
        rhs[c] = source((i + 0.5) * h, (j + 0.5) * h, (k + 0.5) * h, v);
      }
  HYPRE_StructMatrixSetBoxValues(A, lower, upper, 7, entries, values);
  HYPRE_StructMatrixAssemble(A);
  HYPRE_StructVectorSetBoxValues(b, lower, upper, rhs);
  HYPRE_StructVectorSetBoxValues(x, lower, upper, zero);
  HYPRE_StructVectorAssemble(b);
  HYPRE_StructVectorAssemble(x);
  const double t_assemble = now() - t0;

  HYPRE_StructSolver solver;
  HYPRE_StructPFMGCreate(MPI_COMM_WORLD, &solver);
  HYPRE_StructPFMGSetTol(solver, tol);
  HYPRE_StructPFMGSetMaxIter(solver, 100);
  HYPRE_StructPFMGSetLogging(solver, 1);
  HYPRE_StructPFMGSetRelaxType(solver, relax);
  HYPRE_StructPFMGSetNumPreRelax(solver, pre);
  HYPRE_StructPFMGSetNumPostRelax(solver, post);
  const double t1 = now();
  HYPRE_StructPFMGSetup(solver, A, b, x);
  const double t2 = now();
  HYPRE_StructPFMGSolve(solver, A, b, x);
  const double t3 = now();
  int iterations = 0;
  double residual = 0;
  HYPRE_StructPFMGGetNumIterations(solver, &iterations);
  HYPRE_StructPFMGGetFinalRelativeResidualNorm(solver, &residual);
  HYPRE_StructVectorGetBoxValues(x, lower, upper, rhs);
  double err = 0;
  c = 0;
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < n; ++i, ++c) {
        const double exact = sin(M_PI * (i + 0.5) * h) * sin(M_PI * (j + 0.5) * h) * sin(M_PI * (k + 0.5) * h);
        err = fmax(err, fabs(rhs[c] - exact));
      }
  printf("{\"n\": %d, \"relax\": %d, \"pre\": %d, \"post\": %d, \"assemble_s\": %.6e, \"setup_s\": %.6e, "
         "\"solve_s\": %.6e, \"cycles\": %d, \"relative_residual\": %.6e, \"error_max\": %.10e}\n",
         n, relax, pre, post, t_assemble, t2 - t1, t3 - t2, iterations, residual, err);
  HYPRE_StructPFMGDestroy(solver);
  HYPRE_StructMatrixDestroy(A);
  HYPRE_StructVectorDestroy(b);
  HYPRE_StructVectorDestroy(x);
  HYPRE_StructStencilDestroy(stencil);
  HYPRE_StructGridDestroy(grid);
  free(values);
  free(rhs);
  free(zero);
  HYPRE_Finalize();
  MPI_Finalize();
  return 0;
}
