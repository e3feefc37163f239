// test_persist runs with the PM-octree's invariant checks on (HM_PM_CHECK=1: every changing
// operation ends with valid(), every restore with valid() after intact()), unless its environment
// says otherwise (CTest runs the damage tests again with HM_PM_CHECK=0). Set before main, before
// the library first reads the option.
#include <cstdlib>

namespace {
const int kChecksOn = setenv("HM_PM_CHECK", "1", 0);
}  // namespace
