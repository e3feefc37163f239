! ALLOCATE/DEALLOCATE a known number of times: 50 arrays of 1000 doubles.
program fortran_pattern
  implicit none
  real(8), allocatable :: a(:)
  integer :: i
  real(8) :: total
  total = 0
  do i = 1, 50
     allocate(a(1000))
     a = i
     total = total + sum(a)
     deallocate(a)
  end do
  if (total < 0) print *, total
end program fortran_pattern
