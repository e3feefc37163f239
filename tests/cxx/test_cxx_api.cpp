#include <gtest/gtest.h>

#include <hetmem/hetmem.hpp>
#include <list>
#include <map>
#include <memory_resource>
#include <string>
#include <vector>

#include "../support.h"

class CxxApi : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(hm_test::configure("capacity=emul:cxl"), HM_OK); }
  void TearDown() override { hm_finalize(); }
};

TEST_F(CxxApi, ContainersOnATier) {
  hm::Tier cap = hm::Tier::of(hm::Role::capacity);
  uint64_t before = cap.stats().in_use;
  {
    std::vector<double, hm::TierAllocator<double>> v(hm::TierAllocator<double>{cap});
    for (int i = 0; i < 100000; ++i) v.push_back(i);
    EXPECT_EQ(hm::Tier::find("emul:cxl"), cap);
    hm_tier_t t;
    ASSERT_EQ(hm_ptr_tier(v.data(), &t), HM_OK);
    EXPECT_EQ(t, cap.id());
    EXPECT_GT(cap.stats().in_use, before + 100000 * sizeof(double) - 1);
    std::map<int, std::string, std::less<>, hm::TierAllocator<std::pair<const int, std::string>>> m(
        hm::TierAllocator<std::pair<const int, std::string>>{cap});
    m[1] = "one";
    EXPECT_EQ(m.at(1), "one");
  }
  EXPECT_EQ(cap.stats().in_use, before);
}

TEST_F(CxxApi, PmrResourcePerTier) {
  hm::MemoryResource *fast = hm::resource(hm::Role::fast);
  EXPECT_EQ(fast, hm::resource(hm::Tier::of(hm::Role::fast))) << "one resource per tier";
  std::pmr::vector<int> v(fast);
  v.resize(5000, 7);
  hm_tier_t t;
  ASSERT_EQ(hm_ptr_tier(v.data(), &t), HM_OK);
  EXPECT_EQ(t, hm::Tier::of(hm::Role::fast).id());
  EXPECT_FALSE(fast->is_equal(*hm::resource(hm::Role::capacity)));
  std::pmr::monotonic_buffer_resource mono(hm::resource(hm::Role::capacity));
  std::pmr::list<int> l(&mono);
  l.push_back(3);
  EXPECT_EQ(l.front(), 3);
}

TEST_F(CxxApi, NamedAllocators) {
  hm::Allocator host = hm::Allocator::get("FAST");
  EXPECT_EQ(host.tier(), hm::Tier::of(hm::Role::fast));
  hm::Allocator::define("app::temporaries", hm::Tier::of(hm::Role::capacity), HM_STRICT);
  hm::Allocator tmp = hm::Allocator::get("app::temporaries");
  void *p = tmp.allocate(1000);
  hm_tier_t t;
  hm_ptr_tier(p, &t);
  EXPECT_EQ(t, hm::Tier::of(hm::Role::capacity).id());
  tmp.deallocate(p);
  EXPECT_EQ(hm::Allocator::get("emul:cxl").tier(), hm::Tier::of(hm::Role::capacity));
  try {
    hm::Allocator::get("DEVICE");
    FAIL() << "unknown names throw";
  } catch (const hm::Error &e) {
    EXPECT_EQ(e.code(), HM_ENOTIER);
    EXPECT_NE(std::string(e.what()).find("known: dram"), std::string::npos) << e.what();
  }
}

TEST_F(CxxApi, RaiiHandles) {
  hm::Tier fast = hm::Tier::of(hm::Role::fast), cap = hm::Tier::of(hm::Role::capacity);
  {
    hm::Buffer<float> field(fast, 1 << 20, HM_MOVABLE | HM_ZERO);
    field[12] = 3.5f;
    EXPECT_EQ(field.tier(), fast);
    float *addr = field.data();
    field.move_to(cap);
    EXPECT_EQ(field.data(), addr);
    EXPECT_EQ(field.tier(), cap);
    EXPECT_EQ(field[12], 3.5f);
    hm::Buffer<float> moved = std::move(field);
    EXPECT_EQ(field.data(), nullptr);
    EXPECT_EQ(moved.size(), 1u << 20);
    auto obj = hm::make_unique_on<std::string>(cap, "on the capacity tier");
    EXPECT_EQ(*obj, "on the capacity tier");
    {
      hm::ModeScope scope(hm::Role::capacity);
      EXPECT_EQ(hm_mode_current(), cap.id());
    }
    EXPECT_EQ(hm_mode_current(), fast.id());
    hm::Arena arena(fast);
    int *ints = arena.allocate_array<int>(100);
    ints[99] = 1;
    EXPECT_EQ(arena.stats().used, 400u);
    arena.reset();
    EXPECT_EQ(arena.stats().peak, 400u);
  }
  EXPECT_EQ(fast.stats().in_use, 0u);
  EXPECT_EQ(cap.stats().in_use, 0u);
}

TEST_F(CxxApi, StrictFailureThrows) {
  hm::Tier fast = hm::Tier::of(hm::Role::fast);
  fast.set_budget(1 << 20);
  EXPECT_THROW((hm::Buffer<char>(fast, 2 << 20, HM_STRICT)), hm::Error);
  std::vector<char, hm::TierAllocator<char>> v(hm::TierAllocator<char>{fast, HM_STRICT});
  EXPECT_THROW(v.resize(4 << 20), std::bad_alloc);
}

TEST_F(CxxApi, PhaseGuard) {
  {
    hm::Phase phase("cxx-phase");
    hm::next_iteration();
  }
  uint64_t calls = 0;
  double seconds = 0;
  ASSERT_EQ(hm_phase_stats("cxx-phase", &calls, &seconds), HM_OK);
  EXPECT_EQ(calls, 1u);
  EXPECT_THROW(hm::Phase(""), hm::Error);
}
