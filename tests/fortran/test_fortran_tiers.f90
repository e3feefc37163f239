! Allocates on two tiers from Fortran and checks the per-tier accounting exactly.
program test_fortran_tiers
  use, intrinsic :: iso_c_binding
  use hetmem
  implicit none
  real(c_double), pointer :: fast_a(:), cap_a(:, :, :)
  integer(c_int32_t), pointer :: idx(:)
  type(hm_tier_stats_t) :: f0, c0, f1, c1, f2, c2
  integer(c_int) :: fast, cap, rc, t
  integer :: failures, stat, i

  failures = 0
  if (hm_init() /= HM_OK) then
     print *, "hm_init failed: ", hm_last_error_f()
     stop 1
  end if
  rc = hm_role_tier(HM_FAST, fast)
  rc = hm_role_tier(HM_CAPACITY, cap)
  if (fast == cap) call check(.false., "fast and capacity map to different tiers")
  rc = hm_tier_stats(fast, f0)
  rc = hm_tier_stats(cap, c0)
  call check(hm_phase_begin_f("setup") == HM_OK, "a phase begins from Fortran")

  call hm_allocate(fast_a, 1000, HM_FAST)            ! 8000 bytes: class of 8192
  call hm_allocate(cap_a, [64, 64, 64], HM_CAPACITY)  ! 2 MiB: its own mapping
  rc = hm_mode_push(HM_CAPACITY)
  call hm_allocate(idx, 10, HM_CAPACITY)
  rc = hm_mode_pop()
  fast_a = 1.0d0
  cap_a = 2.0d0
  call check(hm_access(c_loc(cap_a), int(size(cap_a), c_size_t) * 8_c_size_t, HM_ACCESS_WRITE) == HM_OK, &
       "a kernel's writes are declared from Fortran")
  call check(hm_access_scattered(c_loc(cap_a), 100_c_int64_t, 8_c_size_t, &
       ior(HM_ACCESS_READ, HM_ACCESS_DEPENDENT)) == HM_OK, "a pointer chase is declared from Fortran")
  call check(hm_access(c_loc(cap_a), 8_c_size_t, 0) == HM_EINVAL, "a declaration without a direction is refused")
  block
    integer(c_int) :: cls, cls_again, where
    type(c_ptr) :: obj
    call check(hm_class_define_f("fortran.field", HM_CLASS_HOT, 5, cls) == HM_OK, "a class is defined from Fortran")
    call check(hm_class_define_f("fortran.field", HM_CLASS_HOT, 5, cls_again) == HM_OK .and. cls_again == cls, &
         "defining it again gives the same class")
    obj = hm_class_alloc(cls, 4096_c_size_t, 0_c_size_t, 0)
    call check(c_associated(obj), "an object of the class is allocated")
    call check(hm_ptr_tier(obj, where) == HM_OK .and. where == fast, "first-touch puts it on the fast tier")
    call hm_free(obj)
    call check(hm_class_interleave(cls, 150) == HM_EINVAL, "an interleave share over 100% is refused")
    call check(hm_class_interleave(cls, 50) == HM_OK, "a class asks for half of each object on the fast tier")
    obj = hm_class_alloc(cls, 4194304_c_size_t, 0_c_size_t, 0)
    call check(hm_ptr_tier(obj, where) == HM_OK .and. where == cap, "the first half of a 4 MiB object: capacity")
    call check(hm_ptr_tier(c_ptr_offset(obj, 4194303), where) == HM_OK .and. where == fast, &
         "its last byte: the fast tier")
    call hm_free(obj)
    call check(hm_class_interleave(cls, -1) == HM_OK, "and no interleave again")
  end block
  idx = [(i, i = 1, 10)]

  call check(hm_phase_end() == HM_OK .and. hm_iteration_next() == HM_OK, "the phase ends, the iteration advances")
  call check(hm_phase_end() == HM_EINVAL, "ending a phase that is not open is an error")
  rc = hm_tier_stats(fast, f1)
  rc = hm_tier_stats(cap, c1)
  call check(f1%in_use - f0%in_use == int(hm_usable_size(c_loc(fast_a(1))), c_int64_t), &
       "fast tier in_use grew by the usable size of the fast array")
  call check(c1%in_use - c0%in_use == int(hm_usable_size(c_loc(cap_a(1, 1, 1))) + &
       hm_usable_size(c_loc(idx(1))), c_int64_t), "capacity tier in_use grew by both capacity arrays")
  call check(c1%in_use - c0%in_use >= 64 * 64 * 64 * 8 + 40, "capacity bytes at least what was asked")
  rc = hm_ptr_tier(c_loc(cap_a(1, 1, 1)), t)
  call check(t == cap, "the 3-D array lives on the capacity tier")
  rc = hm_ptr_tier(c_loc(fast_a(1)), t)
  call check(t == fast, "the 1-D array lives on the fast tier")
  call check(abs(sum(cap_a) - 2.0d0 * 64**3) < 1d-6 .and. sum(idx) == 55, "data written is read back")

  ! Strict over budget: an error, not a crash.
  call hm_deallocate(fast_a)
  rc = hm_tier_set_budget(fast, f1%in_use + 4096_c_int64_t)
  call hm_allocate(fast_a, 1000000, HM_FAST, HM_STRICT, stat)
  call check(stat /= 0, "a strict allocation over the fast budget fails")
  call check(index(hm_last_error_f(), "budget") > 0, "the error names the budget: " // hm_last_error_f())
  rc = hm_tier_set_budget(fast, 0_c_int64_t)
  call hm_allocate(fast_a, 1000, HM_FAST)

  call hm_deallocate(fast_a)
  call hm_deallocate(cap_a)
  call hm_deallocate(idx)
  rc = hm_tier_stats(fast, f2)
  rc = hm_tier_stats(cap, c2)
  call check(f2%in_use == f0%in_use .and. c2%in_use == c0%in_use, "everything freed: in_use back to start")
  call check(c2%high_water >= c1%in_use, "capacity high-water mark kept the peak")

  if (failures > 0) then
     print '(i0, a)', failures, " check(s) failed"
     stop 1
  end if
  print '(a)', "fortran tiers: all checks passed"

contains
  ! The address `bytes` past p.
  type(c_ptr) function c_ptr_offset(p, bytes)
    type(c_ptr), intent(in) :: p
    integer, intent(in) :: bytes
    character(kind=c_char), pointer :: a(:)
    call c_f_pointer(p, a, [bytes + 1])
    c_ptr_offset = c_loc(a(bytes + 1))
  end function c_ptr_offset

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (ok) then
       print '(a, a)', "ok   ", what
    else
       print '(a, a)', "FAIL ", what
       failures = failures + 1
    end if
  end subroutine check
end program test_fortran_tiers
