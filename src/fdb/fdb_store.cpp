// The hetmem store for FDB5 (docs/fields.md): an eckit plugin that registers the store type
// `hetmem` and its field location, so that an FDB configured with `store: hetmem` keeps field data
// in hetmem pools on the persistent tier while FDB's TOC catalogue indexes it. FDB's tools, its C
// and C++ API and pyfdb load it through eckit's plugin manifests (share/plugins/hetmem-fdb.yml).
// The pools are libhetmem's (fields/hooks.h): the plugin links libhetmem.so, so a process that
// uses hetmem itself and loads the plugin holds one runtime.
//
// Configuration (the `hetmem:` section of the FDB configuration; every key optional):
//   pool_bytes: 1073741824   each pool file (sparse: only what is written takes room)
//   emulate: optane          charge archive and retrieve as this emulated device (DESIGN.md)
//   verify: true             check every retrieved field's checksum
//   tier: persistent         count the fields a writer writes in this hetmem tier's budget (a tier
//                            or role name), one budget with the process's own allocations there
#include <eckit/config/LocalConfiguration.h>
#include <eckit/exception/Exceptions.h>
#include <eckit/filesystem/PathName.h>
#include <eckit/filesystem/URIManager.h>
#include <eckit/io/DataHandle.h>
#include <eckit/log/Log.h>
#include <eckit/serialisation/Reanimator.h>
#include <eckit/system/Plugin.h>
#include <fdb5/database/FieldLocation.h>
#include <fdb5/database/Store.h>
#include <fdb5/database/WipeState.h>
#include <fdb5/io/SingleGribMungePartFileHandle.h>
#include <fdb5/toc/FileSpace.h>
#include <fdb5/toc/RootManager.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

#include <eccodes.h>

#include "fields/hooks.h"
#include "hetmem/hetmem.h"

namespace hm::fields {
namespace {

// What a hetmem store is configured with (the `hetmem:` section of an FDB configuration).
struct StoreSettings {
  uint64_t pool_bytes = uint64_t{1} << 30;        // each pool file (sparse until written)
  const hm_field_device_t *emulate = nullptr;     // charge archive and retrieve as this device (emulated)
  bool verify = true;                             // check each field's checksum on retrieve
  int tier = -1;                                  // count the fields written in this tier's budget
};

// The emulated device retrieves are charged as: set by the stores a process builds.
std::atomic<const hm_field_device_t *> read_profile{nullptr};
std::atomic<bool> verify_reads{true};

// A failure the user can act on (a full medium, a damaged pool): the message, without the
// backtrace FDB's tools print for a bug.
[[noreturn]] void throw_last(const char *what) {
  const std::string why = hm_last_error();
  throw eckit::Exception(why.rfind("hetmem store", 0) == 0 ? why : std::string("hetmem store: ") + what + ": " + why);
}

// Whether two names are within two edits of each other (a misspelt section name).
bool near(const std::string &a, const std::string &b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()] <= 2;
}

// What the configuration says of a key, as written: for messages that echo it.
std::string as_written(const eckit::LocalConfiguration &c, const std::string &key) {
  if (c.isString(key)) return "'" + c.getString(key) + "'";
  if (c.isIntegral(key)) return std::to_string(c.getLong(key));
  if (c.isBoolean(key)) return c.getBool(key) ? "true" : "false";
  if (c.isFloatingPoint(key)) return std::to_string(c.getDouble(key));
  return "(a list or a section)";
}

[[noreturn]] void refuse(const std::string &key, const std::string &written, const std::string &expected) {
  throw eckit::UserError("hetmem store: hetmem." + key + " = " + written + " in the FDB configuration: " + expected);
}

StoreSettings settings_from(const fdb5::Config &config) {
  StoreSettings s;
  read_profile.store(nullptr);
  verify_reads.store(true);
  for (const std::string &key : config.keys())
    if (key != "hetmem" && near(key, "hetmem"))
      throw eckit::UserError("hetmem store: the FDB configuration has a section '" + key +
                             "', not 'hetmem' (misspelt?): the store's settings would be ignored");
  if (!config.has("hetmem")) return s;
  if (!config.isSubConfiguration("hetmem"))
    throw eckit::UserError("hetmem store: 'hetmem' in the FDB configuration is not a section of keys "
                           "(pool_bytes, emulate, verify, tier)");
  const eckit::LocalConfiguration c = config.getSubConfiguration("hetmem");
  for (const std::string &key : c.keys())
    if (key != "pool_bytes" && key != "emulate" && key != "verify" && key != "tier")
      throw eckit::UserError("hetmem store: unknown key 'hetmem." + key +
                             "' in the FDB configuration (known: pool_bytes, emulate, verify, tier)");
  if (c.has("pool_bytes")) {
    uint64_t bytes = 0;
    if (c.isIntegral("pool_bytes") && c.getLong("pool_bytes") > 0) bytes = static_cast<uint64_t>(c.getLong("pool_bytes"));
    else if (!c.isString("pool_bytes") || hm_size_parse(c.getString("pool_bytes").c_str(), &bytes) != HM_OK)
      refuse("pool_bytes", as_written(c, "pool_bytes"), "a size in bytes, or with a unit (256M, 1G)");
    if (bytes < (uint64_t{64} << 10) || bytes > (uint64_t{1} << 44))
      refuse("pool_bytes", as_written(c, "pool_bytes"), "outside 64 KiB..16 TiB");
    s.pool_bytes = bytes;
  }
  if (c.has("emulate")) {
    if (!c.isString("emulate"))
      refuse("emulate", as_written(c, "emulate"), std::string("a device profile's name (none, ") + hm_field_device_names() + ")");
    const std::string name = c.getString("emulate");
    if (name != "none") {
      s.emulate = hm_field_device(name.c_str());
      if (!s.emulate) refuse("emulate", "'" + name + "'", std::string("not a device profile (known: none, ") + hm_field_device_names() + ")");
    }
  }
  if (c.has("verify")) {
    if (!c.isBoolean("verify")) refuse("verify", as_written(c, "verify"), "true or false");
    s.verify = c.getBool("verify");
  }
  if (c.has("tier")) {
    hm_tier_t tier = -1;
    if (!c.isString("tier")) refuse("tier", as_written(c, "tier"), "a hetmem tier's name or role (fast, capacity, persistent)");
    if (hm_tier_find(c.getString("tier").c_str(), &tier) != HM_OK)
      refuse("tier", as_written(c, "tier"), hm_last_error());
    s.tier = tier;
  }
  read_profile.store(s.emulate);
  verify_reads.store(s.verify);
  return s;
}

// The keys of a GRIB message that the index key leaves out (step, param, levtype, levelist),
// "key=value,..."; "" when the message cannot be read. For messages about a field.
std::string message_keys(const void *data, uint64_t bytes) {
  codes_handle *h = codes_handle_new_from_message(nullptr, data, bytes);
  if (!h) return "";
  std::string out;
  for (const char *key : {"step", "param", "levtype", "levelist"}) {
    char value[128];
    size_t length = sizeof value;
    if (codes_get_string(h, (std::string("mars.") + key).c_str(), value, &length) == CODES_SUCCESS)
      out += (out.empty() ? "" : ",") + std::string(key) + "=" + value;
  }
  codes_handle_delete(h);
  return out;
}

// A retrieved field, read from its pool when FDB reads it: a read of the whole field (FDB's
// retrievals read each field whole into the caller's buffer) goes straight into that buffer, a
// part through a copy of the field's own; either way checked before any of it is handed out
// (fields::FieldReader). Nothing is read while the handles of a retrieval are gathered.
class FieldHandle : public eckit::DataHandle {
 public:
  FieldHandle(std::string pool, uint64_t offset, uint64_t length)
      : pool_(std::move(pool)), offset_(offset), length_(length) {}
  ~FieldHandle() override { hm_field_reader_close(reader_); }
  FieldHandle(const FieldHandle &) = delete;
  FieldHandle &operator=(const FieldHandle &) = delete;
  void print(std::ostream &s) const override {
    s << "hetmem::FieldHandle[pool=" << pool_ << ",offset=" << offset_ << ",length=" << length_
      << ",position=" << position_ << "]";
  }
  eckit::Length openForRead() override {
    position_ = 0;
    open();
    hm_field_charge_read(read_profile.load(), length_);
    return length_;
  }
  long read(void *buffer, long length) override {
    open();
    const uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(std::max(length, 0L)), length_ - position_);
    if (n && hm_field_reader_read(reader_, position_, buffer, n) != HM_OK) throw_last("retrieve");
    position_ += n;
    return static_cast<long>(n);
  }
  void close() override {}
  eckit::Length size() override { return length_; }
  eckit::Length estimate() override { return length_; }
  eckit::Offset position() override { return position_; }
  eckit::Offset seek(const eckit::Offset &to) override {
    position_ = std::min<uint64_t>(static_cast<long long>(to), length_);
    return position_;
  }
  bool canSeek() const override { return true; }
  void skip(const eckit::Length &n) override { seek(eckit::Offset(position_ + static_cast<long long>(n))); }
  std::string title() const override { return "hetmem field"; }

 private:
  void open() {
    if (!reader_ && hm_field_reader_open(pool_.c_str(), offset_, length_, verify_reads.load(), &reader_) != HM_OK)
      throw_last("retrieve");
  }

  std::string pool_;
  uint64_t offset_, length_;
  uint64_t position_ = 0;
  hm_field_reader_t *reader_ = nullptr;
};

}  // namespace

// A field's place: the pool's URI (`hetmem:/db/dir/name.hmpool`), the offset of its data and its
// length. The index keeps one URI per pool, as it keeps one per data file of the POSIX store.
class HetmemFieldLocation : public fdb5::FieldLocation {
 public:
  explicit HetmemFieldLocation(const eckit::URI &uri) : FieldLocation(uri) {}
  HetmemFieldLocation(const eckit::URI &uri, eckit::Offset offset, eckit::Length length, const fdb5::Key &remap)
      : FieldLocation(uri, offset, length, remap) {}
  HetmemFieldLocation(const HetmemFieldLocation &o) : FieldLocation(o.uri_, o.offset_, o.length_, o.remapKey_) {}
  explicit HetmemFieldLocation(eckit::Stream &s) : FieldLocation(s) {}

  eckit::DataHandle *dataHandle() const override {
    // An overlay (fdb-overlay) renames keys inside the GRIB message as it is read.
    if (!remapKey_.empty())
      return new fdb5::SingleGribMungePartFileHandle(uri_.path(), offset_, length_, remapKey_);
    return new FieldHandle(uri_.path().asString(), static_cast<uint64_t>(static_cast<long long>(offset_)),
                           static_cast<uint64_t>(static_cast<long long>(length_)));
  }
  std::shared_ptr<const FieldLocation> make_shared() const override {
    return std::make_shared<HetmemFieldLocation>(*this);
  }
  void visit(fdb5::FieldLocationVisitor &visitor) const override { visitor(*this); }

  static const eckit::ClassSpec &classSpec() { return classSpec_; }

 protected:
  const eckit::ReanimatorBase &reanimator() const override { return reanimator_; }
  void encode(eckit::Stream &s) const override { FieldLocation::encode(s); }
  static eckit::ClassSpec classSpec_;
  static eckit::Reanimator<HetmemFieldLocation> reanimator_;

 private:
  void print(std::ostream &out) const override {
    out << "HetmemFieldLocation[uri=" << uri_ << ",offset=" << offset() << ",length=" << length()
        << ",remapKey=" << remapKey_ << "]";
  }
};

eckit::ClassSpec HetmemFieldLocation::classSpec_ = {&FieldLocation::classSpec(), "HetmemFieldLocation"};
eckit::Reanimator<HetmemFieldLocation> HetmemFieldLocation::reanimator_;

namespace {

// A store's directory from a URI naming it or a pool in it.
eckit::PathName directory_of(const eckit::PathName &p) { return !p.exists() || p.isDir() ? p : p.dirName(); }

}  // namespace

// The store of one database: its pools live in the database's directory, beside FDB's TOC and
// indexes, so that FDB's wipe, purge and move see one directory per database, as with the POSIX
// store. Wiping follows FDB's protocol (the catalogue says which data URIs its indexes name; the
// store adds what else is in the directory).
class HetmemStore : public fdb5::Store {
 public:
  static constexpr const char *kScheme = "hetmem";

  // A writer's store: the database's directory from the roots that hold its catalogue.
  HetmemStore(const fdb5::Key &key, const fdb5::Config &config)
      : directory_(fdb5::StoreRootManager(config).directory(key).directory_), key_(key),
        settings_(settings_from(config)) {}
  // A reader's store, built from the catalogue's location or a field's.
  HetmemStore(const eckit::URI &uri, const fdb5::Config &config)
      : directory_(directory_of(uri.path())), settings_(settings_from(config)) {}

  static eckit::URI uri(const eckit::URI &data_uri) { return eckit::URI(kScheme, data_uri.path().dirName()); }
  eckit::URI uri() const override { return eckit::URI(kScheme, directory_); }

  eckit::DataHandle *retrieve(fdb5::Field &field) const override { return field.dataHandle(); }

  std::unique_ptr<const fdb5::FieldLocation> archive(const fdb5::Key &key, const void *data,
                                                     eckit::Length length) override {
    std::lock_guard<std::mutex> lock(mutex_);  // FDB may archive from several threads of one handle
    if (!writer_) {
      if (!directory_.exists()) directory_.mkdir();
      hm_field_remove_abandoned(directory_.asString().c_str());
      // Unique to this writer (host, process, time), as FDB's POSIX store names its data files.
      const eckit::PathName unique = eckit::PathName::unique(directory_ / key_.valuesToString());
      hm_field_writer_t *writer = nullptr;
      if (hm_field_writer_open(directory_.asString().c_str(), unique.baseName().asString().c_str(),
                               settings_.pool_bytes, settings_.emulate, settings_.tier, &writer) != HM_OK)
        throw_last("archive");
      writer_.reset(writer);
    }
    // The store is given the index's part of the key; with the database it names the field (and
    // a failure names the rest of the key, read from the message).
    std::ostringstream what;
    what << "of " << key << " in " << directory_;
    const char *pool = nullptr;
    uint64_t offset = 0;
    const uint64_t bytes = static_cast<uint64_t>(static_cast<long long>(length));
    if (hm_field_archive(writer_.get(), data, bytes, what.str().c_str(), &pool, &offset) != HM_OK) {
      const std::string keys = message_keys(data, bytes);
      if (!keys.empty()) {
        const std::string why = hm_last_error();
        throw eckit::Exception(why + " (the field: " + keys + ")");
      }
      throw_last("archive");
    }
    ++unflushed_;
    return std::make_unique<HetmemFieldLocation>(eckit::URI(kScheme, eckit::PathName(pool)),
                                                 eckit::Offset(offset), eckit::Length(length), fdb5::Key());
  }

  size_t flush() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (writer_ && hm_field_flush(writer_.get()) != HM_OK) throw_last("flush");
    const size_t n = unflushed_;
    unflushed_ = 0;
    return n;
  }
  void close() override {
    flush();
    std::lock_guard<std::mutex> lock(mutex_);
    writer_.reset();
  }

  void remove(const eckit::URI &uri, std::ostream &log_always, std::ostream &log_verbose, bool doit) const override {
    const eckit::PathName path = uri.path();
    if (path.isDir()) {
      log_verbose << "rmdir: ";
      log_always << path << std::endl;
      if (doit) path.rmdir(false);
      return;
    }
    log_verbose << "Unlinking: ";
    log_always << path << std::endl;
    if (doit) path.unlink(false);
  }

  void print(std::ostream &out) const override { out << "HetmemStore(" << directory_ << ")"; }
  std::string type() const override { return kScheme; }
  bool open() override { return true; }
  bool exists() const override { return directory_.exists(); }
  void checkUID() const override {}

  // Pools (and a killed writer's staging files) in this directory, under either scheme: the
  // catalogue reports the directory's files as `file:` URIs.
  bool uriBelongs(const eckit::URI &uri) const override {
    if (uri.scheme() != kScheme && uri.scheme() != "file" && uri.scheme() != "unix") return false;
    const std::string name = uri.path().baseName().asString();
    return uri.path().dirName().sameAs(directory_) && hm_field_pool_name(name.c_str()) != 0;
  }
  bool uriExists(const eckit::URI &uri) const override { return uri.path().exists(); }
  std::set<eckit::URI> collocatedDataURIs() const override {
    std::set<eckit::URI> out;
    if (!directory_.exists()) return out;
    std::vector<eckit::PathName> files, dirs;
    directory_.children(files, dirs);
    for (const auto &f : files)
      if (hm_field_pool_name(f.baseName().asString().c_str()) == HM_FIELD_POOL_COMMITTED) out.emplace(kScheme, f);
    return out;
  }
  std::set<eckit::URI> asCollocatedDataURIs(const std::set<eckit::URI> &uris) const override {
    std::set<eckit::URI> out;
    for (const auto &u : uris) out.emplace(kScheme, u.path());
    return out;
  }
  std::vector<eckit::URI> getAuxiliaryURIs(const eckit::URI &, bool) const override { return {}; }

  void finaliseWipeState(fdb5::StoreWipeState &state, bool, bool) override {
    if (!directory_.exists()) {
      state.markAllMissing();
      return;
    }
    std::set<eckit::URI> missing;
    for (const auto &u : state.includedDataURIs()) {
      if (!uriBelongs(u))
        throw eckit::SeriousBug("hetmem store: an index to be wiped names " + u.asString() +
                                ", which is not a pool of " + directory_.asString() + "; nothing was wiped");
      if (!u.path().exists()) missing.insert(u);
    }
    for (const auto &u : missing) state.markAsMissing(u);
    if (!state.safeURIs().empty()) return;
    // Everything goes: whatever else is in the directory is reported (the catalogue claims its own).
    std::vector<eckit::PathName> files, dirs;
    directory_.children(files, dirs);
    for (const auto &f : files) {
      const eckit::URI u(kScheme, f);
      if (!state.includedDataURIs().count(u) && !state.safeURIs().count(u))
        state.insertUnrecognised(hm_field_pool_name(f.baseName().asString().c_str()) != 0 ? u : eckit::URI("file", f));
    }
  }
  bool doWipeUnknowns(const std::set<eckit::URI> &unknown) const override {
    for (const auto &u : unknown)
      if (u.path().exists()) remove(u, eckit::Log::info(), eckit::Log::info(), true);
    return true;
  }
  bool doWipeURIs(const fdb5::StoreWipeState &state) const override {
    for (const auto &u : state.includedDataURIs()) remove(u, eckit::Log::info(), eckit::Log::info(), true);
    if (state.safeURIs().empty()) cleanupEmptyDatabase_ = true;
    return true;
  }
  void doWipeEmptyDatabase() const override {
    if (cleanupEmptyDatabase_ && directory_.exists()) remove(uri(), eckit::Log::info(), eckit::Log::info(), true);
    cleanupEmptyDatabase_ = false;
  }
  bool doUnsafeFullWipe() const override { return false; }

 private:
  eckit::PathName directory_;
  fdb5::Key key_;
  StoreSettings settings_;
  std::mutex mutex_;
  struct CloseWriter {
    void operator()(hm_field_writer_t *w) const { hm_field_writer_close(w); }
  };
  std::unique_ptr<hm_field_writer_t, CloseWriter> writer_;
  size_t unflushed_ = 0;
};

namespace {

// eckit parses `hetmem:/path` (as the index keeps it) only for a scheme it knows.
class PoolUriManager : public eckit::URIManager {
 public:
  PoolUriManager() : URIManager("hetmem") {}
  bool exists(const eckit::URI &uri) override { return path(uri).exists(); }
  eckit::DataHandle *newWriteHandle(const eckit::URI &) override { NOTIMP; }
  eckit::DataHandle *newReadHandle(const eckit::URI &uri) override { return path(uri).fileHandle(); }
  eckit::DataHandle *newReadHandle(const eckit::URI &uri, const eckit::OffsetList &o,
                                   const eckit::LengthList &l) override {
    return path(uri).partHandle(o, l);
  }
  std::string asString(const eckit::URI &uri) const override { return uri.name(); }
  eckit::PathName path(const eckit::URI &uri) const override { return eckit::PathName(uri.name()); }
};

PoolUriManager uri_manager;
fdb5::StoreBuilder<HetmemStore> store_builder("hetmem");
fdb5::FieldLocationBuilder<HetmemFieldLocation> location_builder("hetmem");

// What eckit loads through the manifest; the builders above register as the library loads.
class HetmemFdbPlugin : public eckit::system::Plugin {
 public:
  HetmemFdbPlugin() : Plugin("hetmem-fdb", "hetmem-fdb") {}
  std::string version() const override { return HM_FIELDS_VERSION; }
  std::string gitsha1(unsigned int) const override { return "unknown"; }
};

HetmemFdbPlugin plugin;

}  // namespace
}  // namespace hm::fields
