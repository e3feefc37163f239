// Placement policies: where an allocation of an object class goes (docs/placement.md). Every
// policy answers through the same interface, so one binary runs under each, and adding a policy
// adds a class here, not branches at call sites.
#pragma once
#include <string>

#include "hetmem/hetmem.h"

namespace hm::place {

struct Placement {
  int tier;        // -1: no tier has the role the policy asks for
  unsigned flags;  // HM_PREFERRED or HM_STRICT
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char *name() const = 0;
  virtual const char *doc() const = 0;
  virtual Placement place(hm_class_kind_t kind, int priority, size_t size) const = 0;
};

const Policy *policy_find(const std::string &name);  // nullptr if unknown
std::string policy_names();                          // "first-touch, all-fast, slow-only"

}  // namespace hm::place
