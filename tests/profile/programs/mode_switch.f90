! Christgau's (2021) mode switch around an unchanged ALLOCATE: under the preload library
! (`hetmem run -- mode_switch`), the array allocated between hm_mode_push(HM_CAPACITY) and
! hm_mode_pop() lives on the capacity tier; one allocated outside stays with the C library.
program mode_switch
  use, intrinsic :: iso_c_binding
  use hetmem
  implicit none
  real(c_double), allocatable, target :: on_capacity(:), elsewhere(:)
  integer(c_int) :: rc, cap, t
  integer :: failures = 0

  rc = hm_role_tier(HM_CAPACITY, cap)
  rc = hm_mode_push(HM_CAPACITY)
  allocate(on_capacity(1000000))      ! unchanged Fortran ALLOCATE
  rc = hm_mode_pop()
  allocate(elsewhere(1000))
  on_capacity = 1.0d0
  elsewhere = 2.0d0

  rc = hm_ptr_tier(c_loc(on_capacity(1)), t)
  if (rc /= HM_OK .or. t /= cap) then
     print *, "FAIL: the array allocated in the capacity scope is not on the capacity tier", rc, t, cap
     failures = failures + 1
  end if
  rc = hm_ptr_tier(c_loc(elsewhere(1)), t)
  if (rc /= HM_ENOTOWNED) then
     print *, "FAIL: the array allocated outside the scope went to hetmem", rc
     failures = failures + 1
  end if
  deallocate(on_capacity)
  deallocate(elsewhere)
  if (failures > 0) stop 1
  print '(a)', "mode switch: ALLOCATE landed on the capacity tier"
end program mode_switch
