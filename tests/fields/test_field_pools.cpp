// The field store's checksum is XXH3 (64 bit), whichever of its loops this CPU runs: the pools
// written on one machine are read on another.
#include <xxhash.h>  // the shared libxxhash, the reference

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fields/field_pools.h"
#include "hetmem/hetmem.h"

TEST(FieldChecksum, IsXxh3AtEveryLengthAndAlignment) {
  std::vector<unsigned char> data((size_t{3} << 20) + 100);
  std::mt19937_64 rng(7);
  for (auto &b : data) b = static_cast<unsigned char>(rng());
  // Short keys, both sides of XXH3's 240-byte switch to its long loop, stripes and blocks.
  for (size_t length : {size_t{0}, size_t{1}, size_t{64}, size_t{240}, size_t{241}, size_t{1023}, size_t{1024},
                        size_t{65536} + 3, size_t{800} << 10, (size_t{3} << 20) + 17})
    for (size_t shift : {size_t{0}, size_t{1}, size_t{13}, size_t{64}})
      EXPECT_EQ(hm::fields::field_checksum(data.data() + shift, length), XXH3_64bits(data.data() + shift, length))
          << length << " bytes at offset " << shift;
}

namespace {
std::string temp_directory() {
  char pattern[] = "/tmp/hetmem-fields-XXXXXX";
  const char *dir = mkdtemp(pattern);
  EXPECT_NE(dir, nullptr);
  return dir ? dir : "/tmp";
}
}  // namespace

// A writer whose fields are counted in a tier: each field's room (record, data, padding) is in the
// tier's budget, and a field the budget cannot hold is refused, named, with nothing counted and the
// fields before it still archived and readable.
TEST(FieldWriter, FieldsCountedInATierStopAtItsBudget) {
  ASSERT_EQ(hm_init(), HM_OK) << hm_last_error();
  hm_tier_t tier = -1;
  ASSERT_EQ(hm_tier_find("capacity", &tier), HM_OK) << hm_last_error();
  hm_tier_stats_t before{};
  ASSERT_EQ(hm_tier_stats(tier, &before), HM_OK);
  const std::string dir = temp_directory();
  hm::fields::StoreSettings settings;
  settings.pool_bytes = uint64_t{4} << 20;
  settings.tier = tier;
  constexpr uint64_t kField = 100000, kRoom = (64 + kField + 63) / 64 * 64;
  ASSERT_EQ(hm_tier_set_budget(tier, before.in_use + 3 * kRoom + kRoom / 2), HM_OK);
  std::vector<char> data(kField, 'x');
  std::vector<hm::fields::FieldSpot> spots(3);
  {
    hm::fields::FieldWriter writer(dir, "w", settings);
    for (auto &spot : spots) ASSERT_EQ(writer.archive(data.data(), kField, "f", &spot), HM_OK) << hm_last_error();
    hm_tier_stats_t now{};
    ASSERT_EQ(hm_tier_stats(tier, &now), HM_OK);
    EXPECT_EQ(now.in_use, before.in_use + 3 * kRoom);
    hm::fields::FieldSpot refused;
    EXPECT_EQ(writer.archive(data.data(), kField, "step=4,param=130", &refused), HM_EBUDGET);
    const std::string why = hm_last_error();
    EXPECT_NE(why.find("field step=4,param=130"), std::string::npos) << why;
    EXPECT_NE(why.find("does not fit its budget"), std::string::npos) << why;
    ASSERT_EQ(hm_tier_stats(tier, &now), HM_OK);
    EXPECT_EQ(now.in_use, before.in_use + 3 * kRoom) << "the refused field counts nothing";
    ASSERT_EQ(writer.flush(), HM_OK) << hm_last_error();
  }
  for (const auto &spot : spots) {
    hm::fields::FieldView view;
    ASSERT_EQ(hm::fields::read_field(spot, true, &view), HM_OK) << hm_last_error();
    EXPECT_EQ(view.length, kField);
  }
  hm_tier_set_budget(tier, 0);
  hm_tier_unclaim(tier, 3 * kRoom);
  std::filesystem::remove_all(dir);
}

// Small fields are gathered and written together, large ones directly, across pools that fill up:
// each reads back as it was archived, and a flush makes all of them durable.
TEST(FieldWriter, SmallAndLargeFieldsInterleavedAcrossFullPoolsReadBackExactly) {
  const std::string dir = temp_directory();
  hm::fields::StoreSettings settings;
  settings.pool_bytes = uint64_t{4} << 20;
  std::vector<std::pair<hm::fields::FieldSpot, std::vector<unsigned char>>> archived;
  std::mt19937_64 rng(11);
  {
    hm::fields::FieldWriter writer(dir, "w", settings);
    for (int i = 0; i < 60; ++i) {
      // Mostly small (combined), every seventh above the combining size (written at once).
      const size_t length = i % 7 == 6 ? (size_t{300} << 10) + i : size_t{1} + rng() % (size_t{70} << 10);
      std::vector<unsigned char> data(length);
      for (auto &b : data) b = static_cast<unsigned char>(rng());
      hm::fields::FieldSpot spot;
      ASSERT_EQ(writer.archive(data.data(), length, "field " + std::to_string(i), &spot), HM_OK) << hm_last_error();
      archived.emplace_back(spot, std::move(data));
    }
    ASSERT_EQ(writer.flush(), HM_OK) << hm_last_error();
  }
  std::set<std::string> pools;
  for (const auto &[spot, data] : archived) {
    pools.insert(spot.pool);
    hm::fields::FieldView view;
    ASSERT_EQ(hm::fields::read_field(spot, true, &view), HM_OK) << hm_last_error();
    ASSERT_EQ(view.length, data.size());
    EXPECT_EQ(std::memcmp(view.data, data.data(), data.size()), 0) << spot.pool << " at " << spot.offset;
  }
  EXPECT_GE(pools.size(), 2u) << "the fields should have filled more than one 4 MiB pool";
  std::filesystem::remove_all(dir);
}

// A reader hands out the field whole into the caller's buffer, or in parts in any order, the same
// bytes either way; a damaged byte fails whichever read comes first, whole or part (a part read
// leaves the caller's buffer untouched); a read past the field's end and one before opening fail.
TEST(FieldReader, WholeAndPartReadsGiveTheFieldAndRefuseADamagedOne) {
  const std::string dir = temp_directory();
  hm::fields::StoreSettings settings;
  settings.pool_bytes = uint64_t{4} << 20;
  std::vector<unsigned char> data((size_t{300} << 10) + 5);
  std::mt19937_64 rng(3);
  for (auto &b : data) b = static_cast<unsigned char>(rng());
  hm::fields::FieldSpot spot, second;
  {
    hm::fields::FieldWriter writer(dir, "w", settings);
    ASSERT_EQ(writer.archive(data.data(), data.size(), "f", &spot), HM_OK) << hm_last_error();
    ASSERT_EQ(writer.archive(data.data(), data.size(), "g", &second), HM_OK) << hm_last_error();
    ASSERT_EQ(writer.flush(), HM_OK) << hm_last_error();
  }
  const uint64_t n = data.size();
  {
    hm::fields::FieldReader whole;
    ASSERT_EQ(whole.open(spot, true), HM_OK) << hm_last_error();
    std::vector<unsigned char> got(n);
    ASSERT_EQ(whole.read(0, got.data(), n), HM_OK) << hm_last_error();
    EXPECT_EQ(got, data);
    unsigned char past[2];
    EXPECT_EQ(whole.read(n - 1, past, 2), HM_EINVAL);
  }
  {
    hm::fields::FieldReader parts;
    ASSERT_EQ(parts.open(spot, true), HM_OK) << hm_last_error();
    std::vector<unsigned char> got(n);
    // The second half first, then the first, in odd pieces.
    for (uint64_t at = n / 2; at < n; at += 4099) ASSERT_EQ(parts.read(at, &got[at], std::min<uint64_t>(4099, n - at)), HM_OK);
    for (uint64_t at = 0; at < n / 2; at += 65536)
      ASSERT_EQ(parts.read(at, &got[at], std::min<uint64_t>(65536, n / 2 - at)), HM_OK);
    EXPECT_EQ(got, data);
  }
  hm::fields::FieldReader unopened;
  unsigned char one;
  EXPECT_EQ(unopened.read(0, &one, 1), HM_EINVAL);
  // One byte of the second field's data changed on the medium.
  {
    FILE *f = std::fopen(second.pool.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fseek(f, static_cast<long>(second.offset + 1000), SEEK_SET), 0);
    std::fputc(data[1000] ^ 0xff, f);
    std::fclose(f);
  }
  for (bool whole : {true, false}) {
    hm::fields::FieldReader reader;
    ASSERT_EQ(reader.open(second, true), HM_OK) << hm_last_error();
    std::vector<unsigned char> got(n, 0);
    EXPECT_EQ(whole ? reader.read(0, got.data(), n) : reader.read(n - 10, &got[n - 10], 10), HM_EFORMAT);
    EXPECT_NE(std::string(hm_last_error()).find("fails its checksum"), std::string::npos) << hm_last_error();
    if (!whole) {
      EXPECT_EQ(std::count(got.begin(), got.end(), 0), static_cast<long>(n)) << "a part handed out";
    }
  }
  // Unverified (`verify: false`), the damaged field is read as it is.
  hm::fields::FieldReader unverified;
  ASSERT_EQ(unverified.open(second, false), HM_OK);
  std::vector<unsigned char> got(n);
  ASSERT_EQ(unverified.read(0, got.data(), n), HM_OK) << hm_last_error();
  EXPECT_EQ(got[1000], data[1000] ^ 0xff);
  std::filesystem::remove_all(dir);
}
