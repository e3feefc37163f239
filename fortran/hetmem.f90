!> Fortran interface to hetmem (ISO_C_BINDING over include/hetmem/hetmem.h).
!>
!> Allocate by role or tier, steer allocations with a scoped mode (the model of hpp_set_mode),
!> and read per-tier accounting:
!>
!>   use hetmem
!>   real(c_double), pointer :: u(:)
!>   call hm_allocate(u, n, HM_CAPACITY)        ! 1-D array of n doubles on the capacity tier
!>   old = hm_mode_push(HM_CAPACITY) ... hm_mode_pop()
!>   call hm_deallocate(u)
module hetmem
  use, intrinsic :: iso_c_binding
  implicit none
  private

  integer(c_int), parameter, public :: HM_OK = 0, HM_ENOMEM = -1, HM_EBUDGET = -2, HM_EINVAL = -3, &
       HM_ENOTIER = -4, HM_EFORMAT = -5, HM_EIO = -6, HM_ENOTSUP = -7, HM_ENOTOWNED = -8, &
       HM_EINIT = -9, HM_ECAPACITY = -10, HM_EBUSY = -11, HM_EAUTH = -12
  integer(c_int), parameter, public :: HM_FAST = 0, HM_CAPACITY = 1, HM_PERSISTENT = 2
  integer(c_int), parameter, public :: HM_PREFERRED = 0, HM_STRICT = 1, HM_ZERO = 2, HM_MOVABLE = 4, &
       HM_HUGE = 8, HM_NO_HUGE = 16
  !> Object classes (hm_class_define): the active policy (HM_POLICY) decides their tier.
  integer(c_int), parameter, public :: HM_CLASS_METADATA = 0, HM_CLASS_TEMPORARY = 1, HM_CLASS_HOT = 2, &
       HM_CLASS_STREAMING = 3, HM_CLASS_COLD = 4
  !> What a kernel did to the bytes it declares (hm_access, hm_access_scattered; docs/emulation.md).
  integer(c_int), parameter, public :: HM_ACCESS_READ = 1, HM_ACCESS_WRITE = 2, HM_ACCESS_RW = 3, &
       HM_ACCESS_DEPENDENT = 4

  !> Per-tier accounting; same layout as hm_tier_stats_t.
  type, bind(C), public :: hm_tier_stats_t
     integer(c_int64_t) :: budget, in_use, high_water, reserved, allocs, frees, fallbacks_in, &
          fallbacks_out, failures, moves_in, bytes_copied_in, emul_charged_ns, huge_bytes
  end type hm_tier_stats_t

  public :: hm_init, hm_finalize, hm_alloc, hm_tier_alloc, hm_free, hm_usable_size, hm_mode_push, &
       hm_mode_push_tier, hm_mode_pop, hm_mode_current, hm_role_tier, hm_tier_stats, hm_tier_set_budget, &
       hm_ptr_tier, hm_tier_find_f, hm_last_error_f, hm_version_f, hm_policy_name_f, hm_allocate, hm_deallocate, hm_phase_begin_f, &
       hm_phase_end, hm_iteration_next, hm_access, hm_access_scattered, hm_class_define_f, hm_class_alloc, &
       hm_class_interleave

  interface
     integer(c_int) function hm_init() bind(C, name="hm_init")
       import :: c_int
     end function hm_init
     subroutine hm_finalize() bind(C, name="hm_finalize")
     end subroutine hm_finalize
     type(c_ptr) function hm_alloc(role, size, align, flags) bind(C, name="hm_alloc")
       import :: c_ptr, c_int, c_size_t
       integer(c_int), value :: role
       integer(c_size_t), value :: size, align
       integer(c_int), value :: flags
     end function hm_alloc
     type(c_ptr) function hm_tier_alloc(tier, size, align, flags) bind(C, name="hm_tier_alloc")
       import :: c_ptr, c_int, c_size_t
       integer(c_int), value :: tier
       integer(c_size_t), value :: size, align
       integer(c_int), value :: flags
     end function hm_tier_alloc
     subroutine hm_free(ptr) bind(C, name="hm_free")
       import :: c_ptr
       type(c_ptr), value :: ptr
     end subroutine hm_free
     integer(c_size_t) function hm_usable_size(ptr) bind(C, name="hm_usable_size")
       import :: c_ptr, c_size_t
       type(c_ptr), value :: ptr
     end function hm_usable_size
     integer(c_int) function hm_mode_push(role) bind(C, name="hm_mode_push")
       import :: c_int
       integer(c_int), value :: role
     end function hm_mode_push
     integer(c_int) function hm_mode_push_tier(tier) bind(C, name="hm_mode_push_tier")
       import :: c_int
       integer(c_int), value :: tier
     end function hm_mode_push_tier
     integer(c_int) function hm_mode_pop() bind(C, name="hm_mode_pop")
       import :: c_int
     end function hm_mode_pop
     integer(c_int) function hm_mode_current() bind(C, name="hm_mode_current")
       import :: c_int
     end function hm_mode_current
     integer(c_int) function hm_role_tier(role, tier) bind(C, name="hm_role_tier")
       import :: c_int
       integer(c_int), value :: role
       integer(c_int), intent(out) :: tier
     end function hm_role_tier
     integer(c_int) function hm_tier_stats(tier, stats) bind(C, name="hm_tier_stats")
       import :: c_int, hm_tier_stats_t
       integer(c_int), value :: tier
       type(hm_tier_stats_t), intent(out) :: stats
     end function hm_tier_stats
     integer(c_int) function hm_tier_set_budget(tier, bytes) bind(C, name="hm_tier_set_budget")
       import :: c_int, c_int64_t
       integer(c_int), value :: tier
       integer(c_int64_t), value :: bytes
     end function hm_tier_set_budget
     integer(c_int) function hm_ptr_tier(ptr, tier) bind(C, name="hm_ptr_tier")
       import :: c_int, c_ptr
       type(c_ptr), value :: ptr
       integer(c_int), intent(out) :: tier
     end function hm_ptr_tier
     integer(c_int) function c_hm_phase_begin(name) bind(C, name="hm_phase_begin")
       import :: c_int, c_char
       character(kind=c_char), dimension(*), intent(in) :: name
     end function c_hm_phase_begin
     !> Declares that a kernel touched `bytes` bytes of the allocation holding `ptr` in order:
     !>   rc = hm_access(c_loc(u), int(size(u), c_size_t) * 8, HM_ACCESS_RW)
     integer(c_int) function hm_access(ptr, bytes, how) bind(C, name="hm_access")
       import :: c_int, c_ptr, c_size_t
       type(c_ptr), value :: ptr
       integer(c_size_t), value :: bytes
       integer(c_int), value :: how
     end function hm_access
     !> Declares `count` scattered accesses of `size` bytes (HM_ACCESS_DEPENDENT: a chain of them).
     integer(c_int) function hm_access_scattered(ptr, count, size, how) bind(C, name="hm_access_scattered")
       import :: c_int, c_ptr, c_size_t, c_int64_t
       type(c_ptr), value :: ptr
       integer(c_int64_t), value :: count
       integer(c_size_t), value :: size
       integer(c_int), value :: how
     end function hm_access_scattered
     integer(c_int) function c_hm_class_define(name, kind, priority, cls) bind(C, name="hm_class_define")
       import :: c_int, c_char
       character(kind=c_char), dimension(*), intent(in) :: name
       integer(c_int), value :: kind, priority
       integer(c_int), intent(out) :: cls
     end function c_hm_class_define
     !> Allocates `size` bytes for a class, on the tier the active policy chooses (free with hm_free).
     type(c_ptr) function hm_class_alloc(cls, size, align, flags) bind(C, name="hm_class_alloc")
       import :: c_int, c_ptr, c_size_t
       integer(c_int), value :: cls
       integer(c_size_t), value :: size, align
       integer(c_int), value :: flags
     end function hm_class_alloc
     !> Each object of the class split fast_percent% on the fast tier (-1: none); see hetmem.h.
     integer(c_int) function hm_class_interleave(cls, fast_percent) bind(C, name="hm_class_interleave")
       import :: c_int
       integer(c_int), value :: cls, fast_percent
     end function hm_class_interleave
     integer(c_int) function hm_phase_end() bind(C, name="hm_phase_end")
       import :: c_int
     end function hm_phase_end
     integer(c_int) function hm_iteration_next() bind(C, name="hm_iteration_next")
       import :: c_int
     end function hm_iteration_next
     integer(c_int) function c_hm_tier_find(name, tier) bind(C, name="hm_tier_find")
       import :: c_int, c_char
       character(kind=c_char), dimension(*), intent(in) :: name
       integer(c_int), intent(out) :: tier
     end function c_hm_tier_find
     type(c_ptr) function c_hm_policy_name() bind(C, name="hm_policy_name")
       import :: c_ptr
     end function c_hm_policy_name
     type(c_ptr) function c_hm_last_error() bind(C, name="hm_last_error")
       import :: c_ptr
     end function c_hm_last_error
     type(c_ptr) function c_hm_version() bind(C, name="hm_version")
       import :: c_ptr
     end function c_hm_version
     integer(c_size_t) function c_strlen(s) bind(C, name="strlen")
       import :: c_ptr, c_size_t
       type(c_ptr), value :: s
     end function c_strlen
  end interface

  !> Allocates a pointer array on a role's tier: call hm_allocate(a, n, role [, flags, stat]).
  interface hm_allocate
     module procedure hm_allocate_r8_1d, hm_allocate_r8_3d, hm_allocate_i4_1d
  end interface hm_allocate
  interface hm_deallocate
     module procedure hm_deallocate_r8_1d, hm_deallocate_r8_3d, hm_deallocate_i4_1d
  end interface hm_deallocate

contains

  !> Finds a tier by name ("dram", "emul:optane", "capacity", ...). Returns an HM_* code.
  !> Defines (or finds) the class `name` of `kind` (HM_CLASS_*); `priority` orders hot classes.
  integer(c_int) function hm_class_define_f(name, kind, priority, cls)
    character(len=*), intent(in) :: name
    integer(c_int), intent(in) :: kind, priority
    integer(c_int), intent(out) :: cls
    hm_class_define_f = c_hm_class_define(trim(name) // c_null_char, kind, priority, cls)
  end function hm_class_define_f

  integer(c_int) function hm_tier_find_f(name, tier)
    character(len=*), intent(in) :: name
    integer(c_int), intent(out) :: tier
    hm_tier_find_f = c_hm_tier_find(trim(name) // c_null_char, tier)
  end function hm_tier_find_f

  !> Starts a phase of the main loop (ends with hm_phase_end(); then hm_iteration_next()).
  integer(c_int) function hm_phase_begin_f(name)
    character(len=*), intent(in) :: name
    hm_phase_begin_f = c_hm_phase_begin(trim(name) // c_null_char)
  end function hm_phase_begin_f

  !> The calling thread's last error message.
  function hm_last_error_f() result(msg)
    character(len=:), allocatable :: msg
    msg = from_c(c_hm_last_error())
  end function hm_last_error_f

  !> The library's version, "MAJOR.MINOR.PATCH".
  function hm_version_f() result(version)
    character(len=:), allocatable :: version
    version = from_c(c_hm_version())
  end function hm_version_f

  !> The active placement policy's name ("first-touch", "hetmem-static", ...).
  function hm_policy_name_f() result(name)
    character(len=:), allocatable :: name
    name = from_c(c_hm_policy_name())
  end function hm_policy_name_f

  function from_c(p) result(msg)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: msg
    character(kind=c_char), pointer :: chars(:)
    integer(c_size_t) :: n, i
    n = c_strlen(p)
    allocate(character(len=n) :: msg)
    if (n == 0) return
    call c_f_pointer(p, chars, [n])
    do i = 1, n
       msg(i:i) = chars(i)
    end do
  end function from_c

  !> Allocates `bytes` on a role's tier, 64-byte aligned; reports failure through stat or stops.
  type(c_ptr) function raw_allocate(bytes, role, flags, stat) result(p)
    integer(c_size_t), intent(in) :: bytes
    integer(c_int), intent(in) :: role
    integer(c_int), intent(in), optional :: flags
    integer, intent(out), optional :: stat
    integer(c_int) :: f
    f = HM_PREFERRED
    if (present(flags)) f = flags
    p = hm_alloc(role, max(bytes, 1_c_size_t), 64_c_size_t, f)
    if (present(stat)) then
       stat = 0
       if (.not. c_associated(p)) stat = 1
    else if (.not. c_associated(p)) then
       error stop "hetmem: allocation failed (pass stat= to handle it)"
    end if
  end function raw_allocate

  subroutine hm_allocate_r8_1d(a, n, role, flags, stat)
    real(c_double), pointer, intent(out) :: a(:)
    integer, intent(in) :: n
    integer(c_int), intent(in) :: role
    integer(c_int), intent(in), optional :: flags
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    p = raw_allocate(int(n, c_size_t) * 8_c_size_t, role, flags, stat)
    nullify(a)
    if (c_associated(p)) call c_f_pointer(p, a, [n])
  end subroutine hm_allocate_r8_1d

  subroutine hm_allocate_r8_3d(a, shape3, role, flags, stat)
    real(c_double), pointer, intent(out) :: a(:, :, :)
    integer, intent(in) :: shape3(3)
    integer(c_int), intent(in) :: role
    integer(c_int), intent(in), optional :: flags
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    p = raw_allocate(int(product(shape3), c_size_t) * 8_c_size_t, role, flags, stat)
    nullify(a)
    if (c_associated(p)) call c_f_pointer(p, a, shape3)
  end subroutine hm_allocate_r8_3d

  subroutine hm_allocate_i4_1d(a, n, role, flags, stat)
    integer(c_int32_t), pointer, intent(out) :: a(:)
    integer, intent(in) :: n
    integer(c_int), intent(in) :: role
    integer(c_int), intent(in), optional :: flags
    integer, intent(out), optional :: stat
    type(c_ptr) :: p
    p = raw_allocate(int(n, c_size_t) * 4_c_size_t, role, flags, stat)
    nullify(a)
    if (c_associated(p)) call c_f_pointer(p, a, [n])
  end subroutine hm_allocate_i4_1d

  subroutine hm_deallocate_r8_1d(a)
    real(c_double), pointer, intent(inout) :: a(:)
    if (associated(a)) call hm_free(c_loc(a(1)))
    nullify(a)
  end subroutine hm_deallocate_r8_1d

  subroutine hm_deallocate_r8_3d(a)
    real(c_double), pointer, intent(inout) :: a(:, :, :)
    if (associated(a)) call hm_free(c_loc(a(1, 1, 1)))
    nullify(a)
  end subroutine hm_deallocate_r8_3d

  subroutine hm_deallocate_i4_1d(a)
    integer(c_int32_t), pointer, intent(inout) :: a(:)
    if (associated(a)) call hm_free(c_loc(a(1)))
    nullify(a)
  end subroutine hm_deallocate_i4_1d

end module hetmem
