// The transport of a process group of one rank (openmtia/distributed.py's
// transport() for world_size 1): its collectives move nothing between
// processes, so they run in the collective's task itself (a copy where the
// output is another tensor than the input), with no Gloo group and no hop to
// its threads. TorchRec's DistributedModelParallel and DDP make such a group
// in a one-process job and call its all_to_all and all_reduce every step.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace openmtia::dist {

c10::intrusive_ptr<c10d::Backend> makeLocalTransport();

}  // namespace openmtia::dist
