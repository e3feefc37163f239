!> A cell-centred geometric multigrid solver for the variable-coefficient Poisson problem of PALM's
!> pressure solver: -(p_xx + p_yy + (kappa(z) p_z)_z) = f on the unit cube, kappa varying with height
!> only, boundaries periodic in every direction or homogeneous Dirichlet on every face. Over-relaxed
!> red-black Gauss-Seidel smoothing (each colour's cells depend only on the other colour: any thread
!> count gives the same bits), restriction by the mean of the 8 children, trilinear prolongation,
!> V- or W-cycles down to a 2^3 grid solved by many sweeps.
!>
!> Placement: the hierarchy's arrays (solution, right-hand side, residual per level) are object
!> classes, "mg.level0" (the finest) to "mg.levelL", hot, the coarser the higher the priority:
!> the placement policy decides where they go. Each level's work is a marked phase.
module mg_solver
  use, intrinsic :: iso_c_binding
  use hetmem
  implicit none
  private

  integer, parameter, public :: BC_DIRICHLET = 0, BC_PERIODIC = 1
  real(c_double), parameter :: PI = 3.14159265358979323846264338327950288_c_double

  type, public :: mg_level
     integer :: n = 0                                    ! cells per direction
     real(c_double) :: h = 0                             ! cell size
     real(c_double), pointer :: p(:, :, :) => null()     ! (0:n+1)^3 with one ghost layer
     real(c_double), pointer :: f(:, :, :) => null()
     real(c_double), pointer :: r(:, :, :) => null()
     real(c_double), allocatable :: kz(:)                ! kappa at the z faces 0..n (z = k h)
  end type mg_level

  type, public :: mg_settings
     integer :: bc = BC_DIRICHLET
     integer :: gamma = 1                                ! 1: V-cycle, 2: W-cycle
     integer :: pre = 2, post = 2                        ! smoothing sweeps before and after
     integer :: coarse_sweeps = 40                       ! red-black sweeps on the 2^3 grid
  end type mg_settings

  public :: mg_create, mg_destroy, mg_cycle, mg_residual_norm, mg_set_problem, mg_error_max, kappa
  public :: mg_levels_bytes

  !> The amplitude of kappa's variation: 0.5 (PALM-like, the default) or 0 (the model problem,
  !> the constant-coefficient Poisson equation).
  real(c_double), public :: kappa_variation = 0.5_c_double
  !> The smoother's over-relaxation: 1.2 took the V(2,2) factor from 0.12-0.19 to 0.06-0.07 here
  !> (1.0 to 1.4 measured; 1.4 diverges towards 0.25).
  real(c_double), public :: omega = 1.2_c_double

contains

  !> The vertical coefficient: smooth, between 1 - v and 1 + v (v = kappa_variation), periodic in z.
  real(c_double) function kappa(z)
    real(c_double), intent(in) :: z
    kappa = 1.0_c_double + kappa_variation * sin(2 * PI * z)
  end function kappa

  !> Bytes the hierarchy of a grid of n^3 cells takes (three arrays per level with ghosts).
  integer(c_int64_t) function mg_levels_bytes(n) result(bytes)
    integer, intent(in) :: n
    integer :: m
    bytes = 0
    m = n
    do while (m >= 2)
       bytes = bytes + 3_c_int64_t * 8_c_int64_t * int(m + 2, c_int64_t)**3
       m = m / 2
    end do
  end function mg_levels_bytes

  !> Allocates the hierarchy for n^3 cells (n a power of two, at least 4). Each level's three arrays
  !> are one object of class "mg.levelL". stat /= 0 (and the message in hm_last_error_f()) when an
  !> allocation is refused.
  subroutine mg_create(levels, n, stat)
    type(mg_level), allocatable, intent(out) :: levels(:)
    integer, intent(in) :: n
    integer, intent(out) :: stat
    integer :: count, l, m, k
    integer(c_int) :: cls, rc
    character(len=32) :: name
    count = 0
    m = n
    do while (m >= 2)
       count = count + 1
       m = m / 2
    end do
    allocate(levels(0:count - 1))
    stat = 0
    m = n
    do l = 0, count - 1
       levels(l)%n = m
       levels(l)%h = 1.0_c_double / m
       write(name, '("mg.level", i0)') l
       ! Coarser levels are smaller and visited as often per cycle: the higher priority.
       rc = hm_class_define_f(trim(name), HM_CLASS_HOT, int(50 + 5 * l, c_int), cls)
       if (rc /= HM_OK) then
          stat = 1
          return
       end if
       call level_arrays(levels(l), cls, stat)
       if (stat /= 0) return
       allocate(levels(l)%kz(0:m))
       do k = 0, m
          levels(l)%kz(k) = kappa(k * levels(l)%h)
       end do
       m = m / 2
    end do
  end subroutine mg_create

  subroutine level_arrays(lv, cls, stat)
    type(mg_level), intent(inout) :: lv
    integer(c_int), intent(in) :: cls
    integer, intent(out) :: stat
    type(c_ptr) :: block
    real(c_double), pointer :: all(:, :, :, :)
    integer :: e
    e = lv%n + 2
    block = hm_class_alloc(cls, 3_c_size_t * 8_c_size_t * int(e, c_size_t)**3, 64_c_size_t, HM_ZERO)
    stat = 0
    if (.not. c_associated(block)) then
       stat = 1
       return
    end if
    call c_f_pointer(block, all, [e, e, e, 3])
    lv%p(0:, 0:, 0:) => all(:, :, :, 1)
    lv%f(0:, 0:, 0:) => all(:, :, :, 2)
    lv%r(0:, 0:, 0:) => all(:, :, :, 3)
  end subroutine level_arrays

  !> Declares a kernel's pass over one of a level's arrays (the emulated tiers charge by it).
  subroutine declare(lv, a, how)
    type(mg_level), intent(in) :: lv
    real(c_double), intent(in), target :: a(0:, 0:, 0:)
    integer(c_int), intent(in) :: how
    integer(c_int) :: rc
    rc = hm_access(c_loc(a(0, 0, 0)), 8_c_size_t * int(lv%n + 2, c_size_t)**3, how)
  end subroutine declare

  subroutine mg_destroy(levels)
    type(mg_level), allocatable, intent(inout) :: levels(:)
    integer :: l
    if (.not. allocated(levels)) return
    do l = lbound(levels, 1), ubound(levels, 1)
       if (associated(levels(l)%p)) call hm_free(c_loc(levels(l)%p(0, 0, 0)))
       nullify(levels(l)%p, levels(l)%f, levels(l)%r)
    end do
    deallocate(levels)
  end subroutine mg_destroy

  !> The manufactured problem on the finest level: f from the exact solution, p = 0.
  subroutine mg_set_problem(lv, bc)
    type(mg_level), intent(inout) :: lv
    integer, intent(in) :: bc
    integer :: i, j, k
    real(c_double) :: x, y, z
    !$omp parallel do private(i, j, x, y, z)
    do k = 1, lv%n
       z = (k - 0.5_c_double) * lv%h
       do j = 1, lv%n
          y = (j - 0.5_c_double) * lv%h
          do i = 1, lv%n
             x = (i - 0.5_c_double) * lv%h
             lv%f(i, j, k) = source(x, y, z, bc)
             lv%p(i, j, k) = 0
          end do
       end do
    end do
    !$omp end parallel do
  end subroutine mg_set_problem

  !> Exact solutions: sin(pi x) sin(pi y) sin(pi z) (Dirichlet), sin(2 pi x) sin(2 pi y) sin(2 pi z)
  !> (periodic, mean zero).
  pure real(c_double) function exact(x, y, z, bc)
    real(c_double), intent(in) :: x, y, z
    integer, intent(in) :: bc
    real(c_double) :: a
    a = merge(PI, 2 * PI, bc == BC_DIRICHLET)
    exact = sin(a * x) * sin(a * y) * sin(a * z)
  end function exact

  !> f = -(p_xx + p_yy + kappa' p_z + kappa p_zz) for the exact p.
  real(c_double) function source(x, y, z, bc)
    real(c_double), intent(in) :: x, y, z
    integer, intent(in) :: bc
    real(c_double) :: a, sxy
    a = merge(PI, 2 * PI, bc == BC_DIRICHLET)
    sxy = sin(a * x) * sin(a * y)
    source = 2 * a * a * sxy * sin(a * z) + kappa(z) * a * a * sxy * sin(a * z) &
         - (2 * PI * kappa_variation * cos(2 * PI * z)) * a * cos(a * z) * sxy
  end function source

  !> max |p - p_exact| over the cells of the finest level.
  real(c_double) function mg_error_max(lv, bc) result(err)
    type(mg_level), intent(in) :: lv
    integer, intent(in) :: bc
    integer :: i, j, k
    real(c_double) :: shift
    shift = 0
    if (bc == BC_PERIODIC) shift = mean(lv, lv%p)  ! the periodic solution is defined up to a constant
    err = 0
    !$omp parallel do private(i, j) reduction(max:err)
    do k = 1, lv%n
       do j = 1, lv%n
          do i = 1, lv%n
             err = max(err, abs(lv%p(i, j, k) - shift - exact((i - 0.5_c_double) * lv%h, (j - 0.5_c_double) * lv%h, &
                  (k - 0.5_c_double) * lv%h, bc)))
          end do
       end do
    end do
    !$omp end parallel do
  end function mg_error_max

  real(c_double) function mean(lv, a)
    type(mg_level), intent(in) :: lv
    real(c_double), intent(in) :: a(0:, 0:, 0:)
    integer :: k
    real(c_double) :: plane(lv%n)
    ! Plane sums in a fixed order, then their sum: the same bits for any thread count.
    !$omp parallel do
    do k = 1, lv%n
       plane(k) = sum(a(1:lv%n, 1:lv%n, k))
    end do
    !$omp end parallel do
    mean = sum(plane) / real(lv%n, c_double)**3
  end function mean

  !> Ghost cells: copies of the opposite side (periodic) or the negated neighbour (p = 0 on the face).
  subroutine fill_ghosts(lv, a, bc)
    type(mg_level), intent(in) :: lv
    real(c_double), intent(inout) :: a(0:, 0:, 0:)
    integer, intent(in) :: bc
    integer :: n
    n = lv%n
    if (bc == BC_PERIODIC) then
       a(0, :, :) = a(n, :, :)
       a(n + 1, :, :) = a(1, :, :)
       a(:, 0, :) = a(:, n, :)
       a(:, n + 1, :) = a(:, 1, :)
       a(:, :, 0) = a(:, :, n)
       a(:, :, n + 1) = a(:, :, 1)
    else
       a(0, :, :) = -a(1, :, :)
       a(n + 1, :, :) = -a(n, :, :)
       a(:, 0, :) = -a(:, 1, :)
       a(:, n + 1, :) = -a(:, n, :)
       a(:, :, 0) = -a(:, :, 1)
       a(:, :, n + 1) = -a(:, :, n)
    end if
  end subroutine fill_ghosts

  !> Red-black Gauss-Seidel sweeps on one level.
  subroutine smooth(lv, sweeps, bc)
    type(mg_level), intent(inout) :: lv
    integer, intent(in) :: sweeps, bc
    integer :: s, colour, i, j, k, n
    real(c_double) :: h2, ku, kd
    n = lv%n
    h2 = lv%h * lv%h
    do s = 1, sweeps
       call declare(lv, lv%p, HM_ACCESS_RW)
       call declare(lv, lv%f, HM_ACCESS_READ)
       do colour = 0, 1
          call fill_ghosts(lv, lv%p, bc)
          !$omp parallel do private(i, j, ku, kd)
          do k = 1, n
             ku = lv%kz(k)
             kd = lv%kz(k - 1)
             do j = 1, n
                do i = 1 + mod(j + k + colour, 2), n, 2
                   lv%p(i, j, k) = (1 - omega) * lv%p(i, j, k) + omega * (h2 * lv%f(i, j, k) + lv%p(i - 1, j, k) &
                        + lv%p(i + 1, j, k) + lv%p(i, j - 1, k) + lv%p(i, j + 1, k) + ku * lv%p(i, j, k + 1) &
                        + kd * lv%p(i, j, k - 1)) / (4 + ku + kd)
                end do
             end do
          end do
          !$omp end parallel do
       end do
    end do
    call fill_ghosts(lv, lv%p, bc)
  end subroutine smooth

  !> r = f - A p (ghosts of p filled).
  subroutine residual(lv, bc)
    type(mg_level), intent(inout) :: lv
    integer, intent(in) :: bc
    integer :: i, j, k, n
    real(c_double) :: ih2, ku, kd
    n = lv%n
    ih2 = 1 / (lv%h * lv%h)
    call fill_ghosts(lv, lv%p, bc)
    call declare(lv, lv%p, HM_ACCESS_READ)
    call declare(lv, lv%f, HM_ACCESS_READ)
    call declare(lv, lv%r, HM_ACCESS_WRITE)
    !$omp parallel do private(i, j, ku, kd)
    do k = 1, n
       ku = lv%kz(k)
       kd = lv%kz(k - 1)
       do j = 1, n
          do i = 1, n
             lv%r(i, j, k) = lv%f(i, j, k) - ih2 * ((4 + ku + kd) * lv%p(i, j, k) - lv%p(i - 1, j, k) - lv%p(i + 1, j, k) &
                  - lv%p(i, j - 1, k) - lv%p(i, j + 1, k) - ku * lv%p(i, j, k + 1) - kd * lv%p(i, j, k - 1))
          end do
       end do
    end do
    !$omp end parallel do
  end subroutine residual

  !> The coarse right-hand side: the mean of each coarse cell's eight fine residuals.
  subroutine restrict(fine, coarse)
    type(mg_level), intent(in) :: fine
    type(mg_level), intent(inout) :: coarse
    integer :: i, j, k
    call declare(fine, fine%r, HM_ACCESS_READ)
    call declare(coarse, coarse%f, HM_ACCESS_WRITE)
    call declare(coarse, coarse%p, HM_ACCESS_WRITE)
    !$omp parallel do private(i, j)
    do k = 1, coarse%n
       do j = 1, coarse%n
          do i = 1, coarse%n
             coarse%f(i, j, k) = 0.125_c_double * sum(fine%r(2 * i - 1:2 * i, 2 * j - 1:2 * j, 2 * k - 1:2 * k))
             coarse%p(i, j, k) = 0
          end do
       end do
    end do
    !$omp end parallel do
  end subroutine restrict

  !> p_fine += trilinear interpolation of p_coarse (weights 3/4 and 1/4 per direction).
  subroutine prolong(coarse, fine, bc)
    type(mg_level), intent(inout) :: coarse
    type(mg_level), intent(inout) :: fine
    integer, intent(in) :: bc
    integer :: i, j, k, ic, jc, kc, di, dj, dk
    real(c_double), parameter :: w(0:1) = [0.75_c_double, 0.25_c_double]
    call fill_ghosts(coarse, coarse%p, bc)
    call declare(coarse, coarse%p, HM_ACCESS_READ)
    call declare(fine, fine%p, HM_ACCESS_RW)
    !$omp parallel do private(i, j, ic, jc, kc, di, dj, dk)
    do k = 1, fine%n
       kc = (k + 1) / 2
       dk = merge(-1, 1, mod(k, 2) == 1)  ! the nearer coarse neighbour in z
       do j = 1, fine%n
          jc = (j + 1) / 2
          dj = merge(-1, 1, mod(j, 2) == 1)
          do i = 1, fine%n
             ic = (i + 1) / 2
             di = merge(-1, 1, mod(i, 2) == 1)
             fine%p(i, j, k) = fine%p(i, j, k) &
                  + w(0) * (w(0) * (w(0) * coarse%p(ic, jc, kc) + w(1) * coarse%p(ic + di, jc, kc)) &
                  + w(1) * (w(0) * coarse%p(ic, jc + dj, kc) + w(1) * coarse%p(ic + di, jc + dj, kc))) &
                  + w(1) * (w(0) * (w(0) * coarse%p(ic, jc, kc + dk) + w(1) * coarse%p(ic + di, jc, kc + dk)) &
                  + w(1) * (w(0) * coarse%p(ic, jc + dj, kc + dk) + w(1) * coarse%p(ic + di, jc + dj, kc + dk)))
          end do
       end do
    end do
    !$omp end parallel do
  end subroutine prolong

  !> One cycle from level l down (gamma = 1: V, 2: W).
  recursive subroutine mg_cycle(levels, l, s)
    type(mg_level), intent(inout) :: levels(0:)
    integer, intent(in) :: l
    type(mg_settings), intent(in) :: s
    integer :: g, rc
    character(len=24) :: phase
    if (l == ubound(levels, 1)) then
       rc = hm_phase_begin_f("mg.coarse_solve")
       if (s%bc == BC_PERIODIC) call remove_mean(levels(l), levels(l)%f)
       call smooth(levels(l), s%coarse_sweeps, s%bc)
       if (s%bc == BC_PERIODIC) call remove_mean(levels(l), levels(l)%p)
       rc = hm_phase_end()
       return
    end if
    write(phase, '("mg.smooth", i0)') l
    rc = hm_phase_begin_f(trim(phase))
    call smooth(levels(l), s%pre, s%bc)
    rc = hm_phase_end()
    rc = hm_phase_begin_f("mg.residual")
    call residual(levels(l), s%bc)
    rc = hm_phase_end()
    rc = hm_phase_begin_f("mg.restrict")
    call restrict(levels(l), levels(l + 1))
    rc = hm_phase_end()
    do g = 1, s%gamma
       call mg_cycle(levels, l + 1, s)
       if (l + 1 == ubound(levels, 1)) exit  ! the coarsest grid is solved once
    end do
    rc = hm_phase_begin_f("mg.prolong")
    call prolong(levels(l + 1), levels(l), s%bc)
    rc = hm_phase_end()
    rc = hm_phase_begin_f(trim(phase))
    call smooth(levels(l), s%post, s%bc)
    rc = hm_phase_end()
  end subroutine mg_cycle

  subroutine remove_mean(lv, a)
    type(mg_level), intent(inout) :: lv
    real(c_double), intent(inout) :: a(0:, 0:, 0:)
    real(c_double) :: m
    m = mean(lv, a)
    a(1:lv%n, 1:lv%n, 1:lv%n) = a(1:lv%n, 1:lv%n, 1:lv%n) - m
  end subroutine remove_mean

  !> The residual's 2-norm scaled by the cell volume (sqrt(h^3 sum r^2)), computed into lv%r.
  real(c_double) function mg_residual_norm(lv, bc) result(norm)
    type(mg_level), intent(inout) :: lv
    integer, intent(in) :: bc
    integer :: k
    real(c_double) :: plane(lv%n)
    call residual(lv, bc)
    !$omp parallel do
    do k = 1, lv%n
       plane(k) = sum(lv%r(1:lv%n, 1:lv%n, k)**2)
    end do
    !$omp end parallel do
    norm = sqrt(sum(plane) * lv%h**3)
  end function mg_residual_norm

end module mg_solver
