// Whether the device's OpenMP teams busy-wait between parallel regions
// (see team_wait.cpp).
#pragma once

namespace openmtia {

// OPENMTIA_TEAM_WAIT, read once: "adaptive" (the default): a device team's
// idle threads spin for their next region while host threads mostly wait
// for the device, and sleep after a brief spin while they are mostly busy;
// "spin": they always spin (libgomp's default); "sleep": they always sleep
// after a brief spin.
enum class TeamWait { kAdaptive, kSpin, kSleep };
TeamWait teamWaitMode();
// Called by a stream worker before a kernel on every thread (`threads`
// of them): the first such call with more than one starts the control (in
// "adaptive" and "sleep" modes).
void beforeParallelKernel(int threads);
// Whether OpenMP's idle threads sleep after a brief spin now: then ending a
// worker's idle team saves no core, and costs a new team later.
bool teamsSleep();
// At exit, after the stream workers stopped: ends the control thread and
// its team (no thread of openmtia's is left); the control does not start
// after it.
void stopTeamWait();
// "spin", "sleep", or "off" (before the first parallel kernel, in "spin"
// mode, or after stopTeamWait): what the control set last, for tests.
const char* teamWaitState();

}  // namespace openmtia
