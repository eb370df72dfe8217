// Device tasks in torch.profiler: a Kineto activity profiler for mtia.
#pragma once

namespace openmtia {
namespace profiler {

// Registers the plugin with Kineto (once, when _C loads).
void registerKinetoPlugin();

}  // namespace profiler
}  // namespace openmtia
