!> hetmem-mg: a PALM-like multigrid pressure solve on tiered memory (docs/multigrid.md).
!>
!>   hetmem-mg [preset=S|W|B|C] [key=value ...]
!>
!> Each time step updates the domain arrays (PALM's prognostic fields, allocated with a plain
!> ALLOCATE between hm_mode_push(HM_CAPACITY) and hm_mode_pop(): Christgau's (2021) hpp_set_mode pattern)
!> and then solves the pressure problem from zero to the tolerance with multigrid cycles, whose
!> hierarchy is placed by the placement policy (classes mg.level0..).
program hetmem_mg
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: error_unit, output_unit
  use omp_lib, only: omp_get_max_threads, omp_get_wtime
  use hetmem
  use mg_solver
  implicit none

  ! The FDB5 output (fields_output.c): GRIB2 with MARS keys, archived through FDB's C API.
  interface
     integer(c_int) function mg_fields_open(expver, n) bind(C)
       import :: c_int, c_char
       character(kind=c_char), intent(in) :: expver(*)
       integer(c_int), value :: n
     end function mg_fields_open
     integer(c_int) function mg_fields_write(step, param, field, n) bind(C)
       import :: c_int, c_double
       integer(c_int), value :: step, param, n
       real(c_double), intent(in) :: field(*)
     end function mg_fields_write
     integer(c_int) function mg_fields_flush() bind(C)
       import :: c_int
     end function mg_fields_flush
     subroutine mg_fields_close() bind(C)
     end subroutine mg_fields_close
     type(c_ptr) function mg_fields_error() bind(C)
       import :: c_ptr
     end function mg_fields_error
     integer(c_long) function mg_fields_count() bind(C)
       import :: c_long
     end function mg_fields_count
     integer(c_long) function mg_fields_bytes() bind(C)
       import :: c_long
     end function mg_fields_bytes
  end interface

  integer :: n = 64, max_cycles = 30, steps = 1, domain_fields = 6, strict = 0, output_interval = 0
  character(len=16) :: output_expver = "hmmg"
  real(c_double) :: t_output = 0, steady_output = 0
  integer(c_int) :: domain_role = HM_CAPACITY
  type(mg_settings) :: s
  real(c_double) :: tol = 1e-8_c_double
  character(len=256) :: json = ""
  type(mg_level), allocatable :: levels(:)
  real(c_double), allocatable, target :: domain(:, :, :, :)
  real(c_double) :: r0, r, rprev, t0, t_solve, t_domain, t_cycles, factor_product, err, last_factor
  real(c_double) :: steady_solve = 0, steady_domain = 0  ! the steps after the first (placement observes the first)
  real(c_double), allocatable :: history(:)
  integer :: step, cycle, stat, cycles_done, rc, total_cycles
  integer(c_int64_t) :: mg_bytes, domain_bytes

  call parse_arguments()
  if (hm_init() /= HM_OK) call fail(hm_last_error_f())
  mg_bytes = mg_levels_bytes(n)
  domain_bytes = int(domain_fields, c_int64_t) * 8_c_int64_t * int(n + 2, c_int64_t)**3
  write(output_unit, '("hetmem-mg: ", i0, "^3 cells, ", a, ", ", a, "-cycles (", i0, "+", i0, " red-black sweeps), ", &
       & i0, " thread(s); multigrid ", a, " MiB (classes mg.level*, policy ", a, "), domain ", i0, " fields ", &
       & a, " MiB (", a, " tier)")') n, trim(bc_name()), trim(merge("V", "W", s%gamma == 1)), s%pre, s%post, &
       omp_get_max_threads(), mib(mg_bytes), hm_policy_name_f(), domain_fields, mib(domain_bytes), &
       trim(merge("capacity", "fast    ", domain_role == HM_CAPACITY))
  if (strict == 1) call check_budgets()

  ! The domain: an unchanged ALLOCATE, steered to the capacity tier by the scope around it.
  rc = hm_mode_push(domain_role)
  allocate(domain(0:n + 1, 0:n + 1, 0:n + 1, domain_fields), stat=stat)
  rc = hm_mode_pop()
  if (stat /= 0) call fail("the domain arrays cannot be allocated")
  domain = 0
  call report_domain_tier()
  call mg_create(levels, n, stat)
  if (stat /= 0) call fail("the multigrid hierarchy cannot be allocated: " // hm_last_error_f())

  if (output_interval > 0) then
     if (mg_fields_open(trim(output_expver) // c_null_char, int(n, c_int)) /= 0) call fail(fields_error())
  end if

  allocate(history(max_cycles))
  t_domain = 0
  t_cycles = 0
  total_cycles = 0
  do step = 1, steps
     t0 = omp_get_wtime()
     rc = hm_phase_begin_f("domain")
     call update_domain()
     rc = hm_phase_end()
     t_domain = t_domain + (omp_get_wtime() - t0)
     if (step > 1) steady_domain = steady_domain + (omp_get_wtime() - t0)
     call mg_set_problem(levels(0), s%bc)
     t0 = omp_get_wtime()
     r0 = mg_residual_norm(levels(0), s%bc)
     r = r0
     cycles_done = 0
     factor_product = 1
     do cycle = 1, max_cycles
        rprev = r
        call mg_cycle(levels, 0, s)
        r = mg_residual_norm(levels(0), s%bc)
        cycles_done = cycle
        history(cycle) = r / rprev
        if (step == 1) write(output_unit, '("  cycle ", i3, "  residual ", es10.3, "  reduced ", es10.3, "  factor ", f6.4)') &
             cycle, r, r / r0, r / rprev
        if (r <= tol * r0) exit
     end do
     t_solve = omp_get_wtime() - t0
     t_cycles = t_cycles + t_solve
     if (step > 1) steady_solve = steady_solve + t_solve
     total_cycles = total_cycles + cycles_done
     if (output_interval > 0) then
        if (mod(step, output_interval) == 0) then
           t0 = omp_get_wtime()
           call write_fields(step)
           t_output = t_output + (omp_get_wtime() - t0)
           if (step > 1) steady_output = steady_output + (omp_get_wtime() - t0)
        end if
     end if
     rc = hm_iteration_next()
     if (r > tol * r0) then
        write(error_unit, '("hetmem-mg: not converged: residual reduced by ", es10.2e3, " after ", i0, &
             & " cycles (mg.tol = ", es10.2e3, ", mg.max_cycles = ", i0, ")")') r / r0, cycles_done, tol, max_cycles
        stop 1, quiet=.true.
     end if
  end do
  err = mg_error_max(levels(0), s%bc)
  last_factor = history(cycles_done)
  ! The asymptotic factor: the geometric mean over the cycles after the first two.
  factor_product = geometric_mean(history(min(3, cycles_done):cycles_done))
  write(output_unit, '("solved: ", i0, " cycles per step, residual reduced ", es9.2, "; convergence factor ", f6.4, &
       & " per cycle (last ", f6.4, ")")') cycles_done, r / r0, factor_product, last_factor
  write(output_unit, '("discretisation error max|p - p_exact| = ", es11.4, " (h = 1/", i0, ")")') err, n
  write(output_unit, '("time: ", f0.4, " s per solve (", f0.5, " s per cycle), domain update ", f0.4, " s per step, ", &
       & i0, " step(s)")') t_cycles / steps, t_cycles / total_cycles, t_domain / steps, steps
  if (output_interval > 0) then
     write(output_unit, '("output: ", i0, " GRIB fields, ", a, " MiB into FDB (expver ", a, "), ", f0.4, &
          & " s per output step")') mg_fields_count(), mib(int(mg_fields_bytes(), c_int64_t)), trim(output_expver), &
          t_output / max(1, steps / output_interval)
     call mg_fields_close()
  end if
  if (len_trim(json) > 0) call write_json()
  call mg_destroy(levels)
  deallocate(domain)

contains

  !> One output step: the pressure (param 54) and the domain fields (temperature 130, u 131, v 132,
  !> w 135, humidity 133, then 246...) level by level, then a flush that makes the step visible.
  subroutine write_fields(step)
    integer, intent(in) :: step
    integer, parameter :: params(8) = [130, 131, 132, 135, 133, 246, 247, 248]
    integer :: d
    if (mg_fields_write(int(step, c_int), 54_c_int, levels(0)%p, int(n, c_int)) /= 0) call fail(fields_error())
    do d = 1, domain_fields
       if (mg_fields_write(int(step, c_int), int(params(min(d, size(params))) + max(0, d - size(params)), c_int), &
            domain(:, :, :, d), int(n, c_int)) /= 0) call fail(fields_error())
    end do
    if (mg_fields_flush() /= 0) call fail(fields_error())
  end subroutine write_fields

  function fields_error() result(text)
    character(len=:), allocatable :: text
    character(kind=c_char), pointer :: chars(:)
    integer :: i
    call c_f_pointer(mg_fields_error(), chars, [512])
    i = 0
    do while (i < 512)
       if (chars(i + 1) == c_null_char) exit
       i = i + 1
    end do
    allocate(character(len=i) :: text)
    text = transfer(chars(1:i), text)
  end function fields_error

  subroutine fail(message)
    character(len=*), intent(in) :: message
    write(error_unit, '("hetmem-mg: ", a)') message
    stop 2, quiet=.true.
  end subroutine fail

  function bc_name() result(name)
    character(len=16) :: name
    name = merge("dirichlet", "periodic ", s%bc == BC_DIRICHLET)
  end function bc_name

  !> Bytes as MiB with one decimal ("0.2", "7.6").
  function mib(bytes) result(text)
    integer(c_int64_t), intent(in) :: bytes
    character(len=:), allocatable :: text
    character(len=24) :: buf
    write(buf, '(f24.1)') bytes / 1048576.0_c_double
    text = trim(adjustl(buf))
  end function mib

  real(c_double) function geometric_mean(x)
    real(c_double), intent(in) :: x(:)
    geometric_mean = exp(sum(log(max(x, tiny(1.0_c_double)))) / size(x))
  end function geometric_mean

  !> PALM's prognostic step in miniature: each field relaxed towards its neighbours' mean, a
  !> stream over the capacity tier.
  subroutine update_domain()
    integer :: d, i, j, k
    do d = 1, domain_fields
       rc = hm_access(c_loc(domain(0, 0, 0, d)), 8_c_size_t * int(n + 2, c_size_t)**3, HM_ACCESS_RW)
       !$omp parallel do private(i, j)
       do k = 1, n
          do j = 1, n
             do i = 1, n
                domain(i, j, k, d) = 0.5_c_double * domain(i, j, k, d) + 0.0625_c_double * (domain(i - 1, j, k, d) &
                     + domain(i + 1, j, k, d) + domain(i, j - 1, k, d) + domain(i, j + 1, k, d) + 1)
             end do
          end do
       end do
       !$omp end parallel do
    end do
  end subroutine update_domain

  !> Where the unchanged ALLOCATE put the domain (the scope steers it only when the preload library
  !> is in the process, which hetmem-mg links).
  subroutine report_domain_tier()
    integer(c_int) :: at, wanted
    if (size(domain) == 0) return
    if (hm_ptr_tier(c_loc(domain(0, 0, 0, 1)), at) /= HM_OK) at = -1
    if (hm_role_tier(domain_role, wanted) /= HM_OK) wanted = -3
    if (at == wanted) then
       write(output_unit, '("  domain arrays: on the ", a, " tier (ALLOCATE inside hm_mode_push)")') &
            trim(merge("capacity", "fast    ", domain_role == HM_CAPACITY))
    else
       write(output_unit, '("  domain arrays: NOT where hm_mode_push asked (the C library took them)")')
    end if
  end subroutine report_domain_tier

  !> hetmem.strict = 1: the hierarchy must fit the fast tier's budget and the domain the capacity
  !> tier's, before anything is allocated.
  subroutine check_budgets()
    call fits(HM_FAST, mg_bytes, "the multigrid hierarchy")
    call fits(domain_role, domain_bytes, "the domain arrays")
  end subroutine check_budgets

  subroutine fits(role, bytes, what)
    integer(c_int), intent(in) :: role
    integer(c_int64_t), intent(in) :: bytes
    character(len=*), intent(in) :: what
    integer(c_int) :: tier
    type(hm_tier_stats_t) :: st
    character(len=200) :: line
    if (hm_role_tier(role, tier) /= HM_OK) return
    if (hm_tier_stats(tier, st) /= HM_OK) return
    if (st%budget > 0 .and. st%budget - st%in_use < bytes) then
       write(line, '(a, " needs ", a, " MiB; the ", a, " tier''s budget leaves ", a, " MiB")') what, &
            mib(bytes), trim(merge("fast    ", "capacity", role == HM_FAST)), mib(st%budget - st%in_use)
       call fail(trim(line) // " (hetmem.strict = 1)")
    end if
  end subroutine fits

  subroutine write_json()
    integer :: u, ios
    integer(c_int) :: tier
    type(hm_tier_stats_t) :: st
    open(newunit=u, file=trim(json), status="replace", action="write", iostat=ios)
    if (ios /= 0) call fail("mg.json = '" // trim(json) // "' cannot be written")
    write(u, '("{""n"": ", i0, ", ""bc"": """, a, """, ""cycle"": """, a, """, ""threads"": ", i0, ",")') n, &
         trim(bc_name()), trim(merge("V", "W", s%gamma == 1)), omp_get_max_threads()
    write(u, '(" ""cycles"": ", i0, ", ""reduction"": ", es24.16, ", ""factor"": ", es24.16, ", ""last_factor"": ", &
         & es24.16, ",")') cycles_done, r / r0, factor_product, last_factor
    write(u, '(" ""error_max"": ", es24.16, ", ""checksum"": ", es24.16, ",")') err, checksum()
    write(u, '(" ""seconds_per_solve"": ", es14.6, ", ""seconds_per_cycle"": ", es14.6, ", ""domain_seconds_per_step"": ", &
         & es14.6, ", ""multigrid_bytes"": ", i0, ", ""domain_bytes"": ", i0)') t_cycles / steps, t_cycles / total_cycles, &
         t_domain / steps, mg_bytes, domain_bytes
    if (output_interval > 0) write(u, '(" ,""output_s"": ", es14.6, ", ""output_fields"": ", i0, ", ""output_bytes"": ", &
         & i0)') t_output, mg_fields_count(), mg_fields_bytes()
    ! The domain's tier as the process sees it: its arrays, and the fields an FDB store configured
    ! with hetmem.tier counts there (one budget).
    if (hm_role_tier(domain_role, tier) == HM_OK) then
       if (hm_tier_stats(tier, st) == HM_OK) write(u, '(" ,""domain_tier_budget"": ", i0, ", ""domain_tier_in_use"": ", &
            & i0, ", ""domain_tier_high_water"": ", i0)') st%budget, st%in_use, st%high_water
    end if
    if (steps > 1) then
       write(u, '(" ,""steady_solve_s"": ", es14.6, ", ""steady_domain_s"": ", es14.6, ", ""steady_output_s"": ", es14.6, &
            & "}")') steady_solve / (steps - 1), steady_domain / (steps - 1), steady_output / (steps - 1)
    else
       write(u, '("}")')
    end if
    close(u)
  end subroutine write_json

  !> A digest of the finest solution's bits (for bitwise comparisons across runs).
  real(c_double) function checksum()
    integer :: i, j, k
    checksum = 0
    do k = 1, n
       do j = 1, n
          do i = 1, n
             checksum = checksum + levels(0)%p(i, j, k) * (1 + mod(i + 7 * j + 13 * k, 17))
          end do
       end do
    end do
  end function checksum

  subroutine parse_arguments()
    integer :: i, eq, ios
    character(len=256) :: arg, key, value
    do i = 1, command_argument_count()
       call get_command_argument(i, arg)
       if (arg == "--help" .or. arg == "-h") then
          call usage()
          stop 0
       end if
       if (arg == "--version") then
          print '(a)', "hetmem-mg " // hm_version_f()
          stop
       end if
       eq = index(arg, "=")
       if (eq < 2) call fail("arguments are key=value, got '" // trim(arg) // "' (hetmem-mg --help)")
       key = arg(1:eq - 1)
       value = arg(eq + 1:)
       select case (trim(key))
       case ("preset")
          select case (trim(value))
          case ("S")
             n = 64
          case ("W")
             n = 128
          case ("B")
             n = 256
          case ("C")
             n = 512
          case default
             call fail("preset = '" // trim(value) // "': S (64^3), W (128^3), B (256^3) or C (512^3)")
          end select
       case ("mg.n")
          n = whole(key, value, 0)  ! the rule (a power of two, at least 4) is checked below
       case ("mg.bc")
          if (value == "dirichlet") then
             s%bc = BC_DIRICHLET
          else if (value == "periodic") then
             s%bc = BC_PERIODIC
          else
             call fail("mg.bc = '" // trim(value) // "': dirichlet or periodic")
          end if
       case ("mg.cycle")
          if (value == "V" .or. value == "v") then
             s%gamma = 1
          else if (value == "W" .or. value == "w") then
             s%gamma = 2
          else
             call fail("mg.cycle = '" // trim(value) // "': V or W")
          end if
       case ("mg.tol")
          read(value, *, iostat=ios) tol
          if (ios /= 0 .or. verify(trim(value), "0123456789.eE+-") /= 0) &
               call fail("mg.tol = '" // trim(value) // "': a number, the residual reduction to reach")
          if (.not. (tol > 0 .and. tol < 1)) call fail("mg.tol = '" // trim(value) // "': must be in (0, 1)")
       case ("mg.coefficients")
          if (value == "palm") then
             kappa_variation = 0.5_c_double
          else if (value == "constant") then
             kappa_variation = 0
          else
             call fail("mg.coefficients = '" // trim(value) // "': palm (kappa varying with height, the default) " // &
                  "or constant (the model problem)")
          end if
       case ("mg.omega")
          read(value, *, iostat=ios) omega
          if (ios /= 0 .or. verify(trim(value), "0123456789.eE+-") /= 0 .or. .not. (omega > 0 .and. omega < 2)) &
               call fail("mg.omega = '" // trim(value) // "': the smoother's relaxation factor, in (0, 2)")
       case ("mg.max_cycles")
          max_cycles = whole(key, value)
       case ("mg.pre")
          s%pre = whole(key, value, 0)
       case ("mg.post")
          s%post = whole(key, value, 0)
       case ("mg.steps")
          steps = whole(key, value)
       case ("mg.domain_fields")
          domain_fields = whole(key, value, 0)
       case ("mg.domain_role")
          if (value == "capacity") then
             domain_role = HM_CAPACITY
          else if (value == "fast") then
             domain_role = HM_FAST
          else
             call fail("mg.domain_role = '" // trim(value) // "': capacity (the default) or fast")
          end if
       case ("mg.json")
          json = value
       case ("mg.output_interval")
          output_interval = whole(key, value, 0)
       case ("mg.output_expver")
          output_expver = value
       case ("hetmem.strict")
          if (value /= "0" .and. value /= "1") &
               call fail("hetmem.strict = '" // trim(value) // "': 1 (refuse to start when the problem does not fit) or 0")
          strict = merge(1, 0, value == "1")
       case default
          call fail("unknown key '" // trim(key) // "' (known: preset, mg.n, mg.bc, mg.cycle, mg.tol, mg.max_cycles, " // &
               "mg.pre, mg.post, mg.omega, mg.coefficients, mg.steps, mg.domain_fields, mg.domain_role, mg.json, mg.output_interval, mg.output_expver, hetmem.strict)")
       end select
    end do
    if (n < 4 .or. iand(n, n - 1) /= 0) then
       write(arg, '(i0)') n
       call fail("mg.n = " // trim(arg) // ": the hierarchy halves the grid down to 2^3 cells, so the cells per " // &
            "direction must be a power of two, at least 4")
    end if
    ! 16384^3 cells are 2.6e14 bytes per field: far beyond any node, and the largest grid whose
    ! footprint is counted without overflowing.
    if (n > 16384) then
       write(arg, '(i0)') n
       call fail("mg.n = " // trim(arg) // ": at most 16384 cells per direction (one field would need " // &
            "more than 32 TiB)")
    end if
    if (s%pre + s%post == 0) call fail("mg.pre + mg.post = 0: a cycle needs at least one smoothing sweep")
  end subroutine parse_arguments

  integer function whole(key, value, least)
    character(len=*), intent(in) :: key, value
    integer, intent(in), optional :: least
    integer :: ios, low
    low = 1
    if (present(least)) low = least
    read(value, *, iostat=ios) whole
    if (ios /= 0 .or. verify(trim(value), "0123456789") /= 0 .or. len_trim(value) == 0) &
         call fail(trim(key) // " = '" // trim(value) // "': a whole number")
    if (whole < low) call fail(trim(key) // " = '" // trim(value) // "': at least " // trim(itoa(low)))
  end function whole

  function itoa(i) result(text)
    integer, intent(in) :: i
    character(len=12) :: text
    write(text, '(i0)') i
  end function itoa

  subroutine usage()
    write(output_unit, '(a)') "usage: hetmem-mg [preset=S|W|B|C] [key=value ...]", &
         "  preset            S 64^3, W 128^3, B 256^3, C 512^3 cells (the footprint is printed)", &
         "  mg.n              cells per direction (a power of two, >= 4); default 64", &
         "  mg.bc             dirichlet (default) or periodic", &
         "  mg.cycle          V (default) or W", &
         "  mg.coefficients   palm (kappa(z) = 1 + 0.5 sin(2 pi z), default) or constant (the model problem)", &
         "  mg.tol            residual reduction to reach, in (0, 1); default 1e-8", &
         "  mg.max_cycles     default 30;  mg.pre, mg.post: red-black sweeps, default 2 and 2", &
         "  mg.omega          the smoother's over-relaxation, in (0, 2); default 1.2", &
         "  mg.steps          time steps (domain update + pressure solve); default 1", &
         "  mg.domain_fields  domain arrays; default 6", &
         "  mg.domain_role    where hm_mode_push puts the domain: capacity (default) or fast", &
         "  mg.json           write the figures as JSON", &
         "  mg.output_interval  archive the fields into FDB5 every this many steps (0: never, the default);", &
         "                    the FDB configuration is FDB5_CONFIG_FILE (docs/fields.md)", &
         "  mg.output_expver  the MARS experiment version of the output (4 characters); default hmmg", &
         "  hetmem.strict     1: refuse to start when the hierarchy or the domain exceeds its tier's budget", &
         "Placement: HM_POLICY (first-touch, all-fast, memory-mode, hetmem-static, ...), HM_FAST_BUDGET.", &
         "Threads: OMP_NUM_THREADS."
  end subroutine usage

end program hetmem_mg
