// mtia graphs (torch.mtia.MTIAGraph): capture of a stream's work, and replay.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "openmtia/runtime.h"
#include "runtime/generator.h"

namespace openmtia {

struct GraphRng;  // (generator.h)

int64_t graphCreate(bool keep_graph);
void graphDestroy(int64_t handle);
void graphCaptureBegin(int64_t handle, c10::MempoolId_t pool);
void graphCaptureEnd(int64_t handle);
void graphInstantiate(int64_t handle);
void graphReplay(int64_t handle);
void graphReset(int64_t handle);
c10::MempoolId_t graphPool(int64_t handle);
std::vector<std::string> graphTaskNames(int64_t handle);
c10::MempoolId_t graphPoolHandle();
// Whether device's current stream is being captured into a graph.
bool isCapturing(c10::DeviceIndex device);
// The random draws of the graph capturing on device's current stream, if any.
std::shared_ptr<GraphRng> capturingRng(c10::DeviceIndex device);
// The caching allocator's pool for an allocation on `stream`: the stream's
// own, or the pool of the graph capturing on it.
omr::StreamId allocationPoolKey(c10::DeviceIndex device, omr::StreamId stream);

}  // namespace openmtia
