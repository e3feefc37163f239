! The Fortran twin of plan_probe.c: unchanged ALLOCATE statements at three sites, phases marked.
! A field touched whole in every phase (hot), particles a quarter at a time (streaming), a log
! written once (cold). Prints the role of the tier each array is on ("libc" when hetmem does not own it).
program plan_probe
  use, intrinsic :: iso_c_binding
  use hetmem
  implicit none
  real(c_double), allocatable, target :: field(:), particles(:), log_data(:)
  integer, parameter :: nf = 3 * 1024 * 1024, np = 12 * 1024 * 1024, nl = 2 * 1024 * 1024
  integer :: it, q
  integer(c_int) :: rc

  allocate(field(nf))
  allocate(particles(np))
  allocate(log_data(nl))
  field = 1.0d0
  particles = 1.0d0
  log_data = 1.0d0
  do it = 0, 5
     rc = hm_phase_begin_f("push")
     field = field + 1.0d0
     q = mod(it, 4) * (np / 4)
     particles(q + 1:q + np / 4) = particles(q + 1:q + np / 4) + 1.0d0
     rc = hm_phase_end()
     rc = hm_phase_begin_f("solve")
     field = field * 0.5d0
     rc = hm_phase_end()
     rc = hm_iteration_next()
  end do
  print '(a,a)', "field ", where(c_loc(field(1)))
  print '(a,a)', "particles ", where(c_loc(particles(1)))
  print '(a,a)', "log ", where(c_loc(log_data(1)))
  deallocate(field, particles, log_data)
contains
  function where(p) result(name)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: name
    integer(c_int) :: t, fast, capacity, code
    code = hm_ptr_tier(p, t)
    if (code /= HM_OK) then
       name = "libc"
       return
    end if
    code = hm_role_tier(HM_FAST, fast)
    code = hm_role_tier(HM_CAPACITY, capacity)
    if (t == fast) then
       name = "fast"
    else if (t == capacity) then
       name = "capacity"
    else
       name = "other"
    end if
  end function where
end program plan_probe
