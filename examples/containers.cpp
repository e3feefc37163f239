// Standard containers and pmr resources on hetmem tiers.
#include <cstdio>
#include <hetmem/hetmem.hpp>
#include <memory_resource>
#include <vector>

int main() {
  try {
    hm::Tier fast = hm::Tier::of(hm::Role::fast);
    hm::Tier capacity = hm::Tier::of(hm::Role::capacity);

    // Hot field data on the fast tier, a large particle array on the capacity tier.
    std::vector<double, hm::TierAllocator<double>> field(1 << 20, 0.0, hm::TierAllocator<double>{fast});
    std::pmr::vector<float> particles(hm::resource(capacity));
    particles.resize(4 << 20);

    // A named allocator, looked up by string anywhere in the code.
    hm::Allocator::define("app::halo_buffers", fast);
    void *halo = hm::Allocator::get("app::halo_buffers").allocate(1 << 16);

    std::printf("field on %s, particles on %s\n", fast.name().c_str(), capacity.name().c_str());
    hm_stats_print(1);
    hm::Allocator::get("app::halo_buffers").deallocate(halo);
  } catch (const hm::Error &e) {
    std::fprintf(stderr, "example_containers: %s\n", e.what());
    return 1;
  }
  return 0;
}
