// hetmem-pic: a 3D electromagnetic particle-in-cell code on a periodic Yee grid (SI units), on one
// process or split over MPI ranks in boxes of whole tiles (domain.hpp, halo.hpp).
// Fields: one array per component, staggered as in WarpX (Ex at (i+1/2, j, k), Bx at (i, j+1/2,
// k+1/2), ...). Particles: tiles of cells, structure of arrays per tile, each tile one hetmem
// allocation of a streamed tile container (the unit placement stages). Step: Boris push with
// energy-conserving gather and Esirkepov (order 1) deposition into tile-local buffers, a reduction
// in global tile order (bitwise the same for any thread or rank count), B half step / E full step /
// B half step, redistribution.
#pragma once

#include <hetmem/hetmem.hpp>

#include "halo.hpp"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace pic {

constexpr double kC = 299792458.0;
constexpr double kEps0 = 8.8541878128e-12;
constexpr double kQe = 1.602176634e-19;
constexpr double kMe = 9.1093837015e-31;

template <class T>
using TierVector = std::vector<T, hm::TierAllocator<T>>;
// Where an object goes: a tier (pinned by hetmem.fields / hetmem.particles) or a class placed by
// the active policy.
using Where = hm::TierAllocator<double>;

// The object classes of this code (Ren et al. (ICS'21) Table 2): fields are hot, and so are the tiles' current
// buffers (below the fields: written and read every step); particle tiles are streamed (one
// allocation per tile, swept tile by tile), per-step temporaries come from an iteration arena of
// their class, the tile tables (which tile holds which arrays) are metadata.
struct Classes {
  hm::Class fields, tiles, tile_currents, temporary, metadata;
};
Classes define_classes();  // idempotent: the same classes on every call
// Where objects of `cls` go: the role or tier `pinned` names (hetmem.fields, hetmem.particles),
// else the class, placed by the active policy.
Where where_for(const std::string &pinned, hm::Class cls);
// The tier such objects go to first: the pinned one, or the policy's first choice for the class.
hm::Tier first_tier(const std::string &pinned, hm::Class cls);

struct Grid {
  int nx = 0, ny = 0, nz = 0;     // cells
  double dx = 0, dy = 0, dz = 0;  // m
  double lx() const { return nx * dx; }
  double ly() const { return ny * dy; }
  double lz() const { return nz * dz; }
  long cells() const { return static_cast<long>(nx) * ny * nz; }
};

// A field component with one guard layer on every side, over this rank's box of the grid (the
// whole grid in a single-process run), indexed by global cell coordinates. The guard layer is
// filled from the cells' owners (Halo::fill), periodically.
class Field {
 public:
  static constexpr int kGuard = 1;
  Field() = default;
  Field(const FieldLayout &layout, const Where &where);
  double &at(int i, int j, int k) { return data_[index(i, j, k)]; }
  double at(int i, int j, int k) const { return data_[index(i, j, k)]; }
  long index(int i, int j, int k) const { return layout_.index(i, j, k); }
  void zero();
  double *data() { return data_.data(); }
  const double *data() const { return data_.data(); }
  const FieldLayout &layout() const { return layout_; }
  long stride_y() const { return layout_.sx; }
  long guard_cells() const { return layout_.guard_cells(); }  // cells of the guard layer
  long stride_z() const { return layout_.sx * layout_.sy; }
  size_t size_with_guards() const { return data_.size(); }  // every value, the guard layer's too

 private:
  FieldLayout layout_;
  TierVector<double> data_;
};

struct Fields {
  Field ex, ey, ez, bx, by, bz, jx, jy, jz;
};

struct SpeciesParams {
  std::string name = "electrons";
  double charge = -kQe, mass = kMe;
  double density = 1e24;               // m^-3
  int ppc[3] = {1, 1, 1};              // particles per cell along x, y, z
  double u_th = 0;                     // thermal spread of u = gamma v, in units of c
  double u_drift[3] = {0, 0, 0};       // in units of c
  // Langmuir perturbation: u += eps * c * (k/kp) (sin(kx x) cos(ky y) cos(kz z), cyclic) * sign
  double langmuir_eps = 0;
  int langmuir_modes[3] = {0, 0, 0};   // wave numbers as multiples of 2 pi / L
  double langmuir_kp = 0;              // plasma wave number used to scale (total density)
  double langmuir_sign = 1;
};

struct Params {
  Grid grid;
  double cfl = 0.99;
  int steps = 10;
  int tile[3] = {8, 8, 8};
  uint64_t seed = 1;
  std::string pusher = "boris";         // boris or vay
  std::string kernel = "simd";          // the particle kernel: simd (vectorized) or scalar (particle_kernel.hpp)
  std::string simd_target;              // the widest instruction set the vectorized kernel may use ("": the CPU's)
  int sort_interval = 0;                // sort tiles by cell every N steps (0: never)
  bool static_fields = false;           // fields stay as set (pusher tests): no deposit effect, no solve
  std::vector<SpeciesParams> species;
  std::string field_role;               // pins the field arrays to a role or tier ("": their class)
  std::string particle_role;            // pins the particle tiles likewise
  bool strict = false;                  // refuse to start if the problem does not fit the budgets
  bool particles_first = false;         // allocate particles before fields, as WarpX does (Ren et al. (ICS'21) §6)
  std::array<int, 3> decomposition{0, 0, 0};  // ranks along x, y, z (0 0 0: Decomposition chooses)
  // Diagnostics (the CLI's; the library ignores them)
  int output_interval = 0;              // openPMD output every N steps (0: none)
  std::string output_dir = "diags";
  std::string energy_log = "";          // CSV file (empty: diag.directory/energy.csv)
  int progress_interval = 10;
  std::string summary_path = "";        // JSON run summary (summary.hpp; empty: none)
  int checkpoint_interval = 0;          // a checkpoint every N steps (0: none)
  std::string checkpoint_dir;           // where (default diag.directory/checkpoints)
  std::string restart;                  // a checkpoint to continue from ("": start anew)
  std::vector<std::string> warnings;    // what the input check found doubtful but runnable
};

// Bytes the problem needs on the field and particle tiers (fields, particles, tile buffers).
struct Footprint {
  uint64_t fields = 0, particles = 0;  // bytes
  bool overflow = false;               // too large to count in 64 bits
};
Footprint estimate(const Params &p);

// What a kernel works on: one tile's particles, structure of arrays (x, y, z, ux, uy, uz, w, id),
// in a working copy (staged in the migration space, or the tile's home). Trivially copyable.
struct TileView {
  double *x = nullptr, *y = nullptr, *z = nullptr, *ux = nullptr, *uy = nullptr, *uz = nullptr, *w = nullptr;
  uint64_t *id = nullptr;
  size_t n = 0;
  static constexpr size_t kArrays = 8;  // each of 8 bytes per particle
  // The arrays of a tile allocation of `capacity` particles at `base`.
  static TileView over(void *base, size_t capacity, size_t n);
  size_t size() const { return n; }
  // Declares what a kernel did to the tile's arrays (hm::access): positions and momenta, and with
  // `all` the weights and ids too.
  void declare(hm::Access how, bool all) const;
};

// A tile's particles at home: one allocation of its species' stream, so that staging a tile is
// one copy; grows geometrically like a vector.
class Tile : public TileView {
 public:
  Tile(hm::TileStream *stream, size_t index) : stream_(stream), index_(index) {}
  size_t capacity() const { return capacity_; }
  void reserve(size_t capacity);  // to exactly `capacity` (>= size()): grows or shrinks the allocation
  void push_back(double px, double py, double pz, double qx, double qy, double qz, double pw, uint64_t pid);
  void remove(size_t i);  // swap with the last
  // The same particles in a working copy of this tile's allocation (hm::TileStream::acquire).
  TileView in(void *copy) const { return TileView::over(copy, capacity_, n); }

 private:
  hm::TileStream *stream_;
  size_t index_;
  size_t capacity_ = 0;
};

struct Species {
  SpeciesParams params;
  std::unique_ptr<hm::TileStream> stream;  // one allocation per tile (class pic.tiles)
  TierVector<Tile> tiles;
  long count() const;
};

// This rank's share of the run's state, in the order the files hold it (state.cpp): the fields of
// its box, A[k][j][i] (x fastest); per species every tile's count (all ranks', the same on every
// rank), and this rank's particles, tile after tile in global tile order, with the runs of the
// file's particle records they fill.
struct LocalState {
  static constexpr int kFields = 6;  // ex ey ez bx by bz
  Box box;
  std::vector<double> fields[kFields];
  struct Particles {
    std::vector<uint64_t> tile_counts;
    uint64_t total = 0;              // every rank's
    Blocks runs;                     // (first, count) in the file, ascending
    std::vector<double> col[7];      // x y z ux uy uz w
    std::vector<uint64_t> id;
  };
  std::vector<Particles> species;
};
// The runs of a file's particle records (every tile's particles in global tile order, tile_counts
// each) that hold `tiles` (ascending), adjacent ones merged.
Blocks particle_runs(const std::vector<uint64_t> &tile_counts, const std::vector<int> &tiles);

// One rank's part of the run: the fields of its box (with guards) and the particles of its tiles.
// Tiles are numbered globally (x fastest); this rank holds its own, in global order. With one rank
// every tile is its own and the box is the grid. Runs on any decomposition give the same bits.
class Simulation {
 public:
  // Throws std::invalid_argument when the grid cannot be split over comm's ranks as p asks (main
  // checks with Decomposition::make first, to say so before anything is allocated).
  explicit Simulation(const Params &p, const Comm &comm = Comm::world());
  void step();                      // one full PIC step
  void field_step_vacuum();         // Maxwell only (no particles, no current)
  double time() const { return time_; }
  double dt() const { return dt_; }
  int steps_done() const { return steps_; }
  const Grid &grid() const { return p_.grid; }
  const Params &params() const { return p_; }
  // The fields, to change: their guard layers are filled again before they are next read.
  Fields &fields() {
    e_guards_ = b_guards_ = false;
    return f_;
  }
  const Fields &fields() const { return f_; }
  std::vector<Species> &species() { return species_; }
  const Comm &comm() const { return comm_; }
  const Decomposition &decomposition() const { return decomposition_; }
  const Box &box() const { return halo_->layout().box; }
  const ExchangeStats &exchange_stats() const { return halo_->stats; }
  size_t exchange_peers() const { return halo_->peers().size(); }
  // Particles on every rank.
  long global_particles() const;
  // Diagnostics (collective: every rank calls them; the result is the whole run's)
  void deposit_charge(Field &rho) const;            // rho at nodes of this rank's box, guards folded
  // max|div E - (rho + rho_background)/eps0| / max|(rho + rho_background)/eps0|
  double gauss_error() const;
  // The uniform immobile background that neutralises the species' net charge (C/m^3): minus their
  // total charge over the box's volume; 0 (to rounding) for a neutral plasma. A single-species run
  // (electrons only, as preset:L0) oscillates about it, as the analytic plasma frequency assumes.
  double background_charge_density() const { return background_rho_; }
  double field_energy() const;                       // J
  double kinetic_energy(int s) const;                // J
  int tiles_x() const { return ntx_; }
  int tiles_y() const { return nty_; }
  int tiles_z() const { return ntz_; }
  // Checkpoints (checkpoint.cpp): everything needed to continue bit for bit (fields with their
  // guards, every tile's particles in order, time, step, the background), in an openPMD file
  // written beside and renamed into place. restore() replaces this simulation's state with a
  // checkpoint's; false (and *error naming the mismatch or the damage) leaves it untouched.
  // Collective: every rank calls them; the file is written by rank 0 and read by every rank, and
  // every rank gets the same result.
  bool save_checkpoint(const std::string &path, std::string *error);
  bool restore(const std::string &path, std::string *error);
  // This rank's share of the state (collective: the tile counts are summed over ranks).
  void collect(LocalState *out) const;
  // Takes this rank's share back (fields of its box, particles of its tiles). false with *error
  // when it does not fit this problem; nothing is changed then.
  bool adopt(const LocalState &state, std::string *error);


 private:
  template <class Plane>
  void sweep_planes(std::initializer_list<const Field *> in, std::initializer_list<const Field *> out, Plane plane);
  void half_b(double h);
  void full_e(double dt);
  void push_and_deposit();
  void reduce_current();
  void redistribute();
  void sort_by_cell();
  struct Checkpoint {
    LocalState state;
    long long step = 0;
    double time = 0, background_rho = 0;
  };
  bool read_checkpoint(const std::string &path, Checkpoint *out, std::string *error) const;
  int tile_of(double x, double y, double z) const;  // global tile
  int local_tile(int t) const;                         // this rank's index of global tile t (owned)

  Params p_;
  const Comm &comm_;
  Decomposition decomposition_;
  std::unique_ptr<Halo> halo_;
  std::vector<int> tile_ids_;  // global index of each local tile
  double dt_ = 0, time_ = 0;
  double inv_dx_ = 0, inv_dy_ = 0, inv_dz_ = 0;
  int steps_ = 0;
  int ntx_ = 0, nty_ = 0, ntz_ = 0;
  Fields f_;
  std::vector<Species> species_;
  // Tile-local current buffers: (tile cells + 2 on every side) per component, per tile, and
  // kTileBufferPad zeros after them (the vectorized deposition adds zero one past a row).
  static constexpr size_t kTileBufferPad = 4;
  std::vector<TierVector<double>> tile_j_;
  int bx_ = 0, by_ = 0, bz_ = 0;  // buffer extents
  std::unique_ptr<hm::Arena> arena_;  // per-step temporaries (redistribution lists)
  double background_rho_ = 0;
  double ns_per_particle_ = 0;
  // The guard layers of E and of B hold their owners' present values (filled since the last change),
  // so a step fills each once after it changes: three exchanges a step, not four.
  mutable bool e_guards_ = false, b_guards_ = false;
  void fill_guards(bool e, bool b) const;  // the last push's time per particle on one thread (the prefetch model's unit)
};

// Input files: `key = value` lines with WarpX-like names; see docs/pic.md.
// Returns false with a message naming the key (and the closest known one) or the bad value.
bool parse_input(const std::string &text, const std::vector<std::string> &overrides, Params *out, std::string *error);

}  // namespace pic
