// The class registry's internal side: the names of the class kinds.
#pragma once
#include <string>

#include "hetmem/hetmem.h"

namespace hm::place {

// "metadata", "temporary", "hot", "streaming", "cold"; and the kind of such a name (-1 if none).
const char *class_kind_name(hm_class_kind_t kind);
int class_kind_of(const std::string &name);

}  // namespace hm::place
