"""torch.profiler on mtia: the trace's ``distributedInfo`` names the
backend as a real MTIA's trace does, and a profile of mtia stopped in
another thread than the one that started it raises.

torch keeps a profiling session in the thread that started it: stopped from
another thread, it finds none ("disableProfiler called but no active
profiling session found") and exporting the result then crashes the
process, on CPU PyTorch too. A profile of mtia work raises a RuntimeError at
such a stop instead, and stays stoppable from its own thread.

torch writes ``dist.get_backend()``, which for ``init_process_group()``
without a backend is "undefined" and with ``device_id`` the bare plugin name
"openmtia": neither says which device it serves. A real MTIA trace says
"mtia:hccl,cpu:gloo", a device:backend list. A profile of mtia work
(``ProfilerActivity.MTIA``) on a group whose mtia tensors go to openmtia
writes the group's device:backend list instead ("cpu:gloo,mtia:openmtia").
Any other profile, and a backend given as such a list, keeps torch's."""
import threading

import torch


def _mtia_backend_config(info, activities):
    import torch.distributed as dist

    if torch.profiler.ProfilerActivity.MTIA not in activities or ":" in str(info["backend"]):
        return None
    config = dist.get_backend_config()
    return config if "mtia:openmtia" in config.split(",") else None


def _started_here(prof):
    started = getattr(prof, "_openmtia_thread", None)
    if started is not None and started != threading.get_ident():
        raise RuntimeError(
            f"torch.profiler: this profile of mtia was started in thread {started} and is stopped in thread "
            f"{threading.get_ident()}; torch keeps a profiling session in the thread that started it: stop it "
            "there")


def _guard_threads(profiler):
    kineto, profile = profiler._KinetoProfile, profiler.profile
    start_trace = kineto.start_trace

    def start_trace_here(self):
        start_trace(self)
        if torch.profiler.ProfilerActivity.MTIA in self.activities:
            self._openmtia_thread = threading.get_ident()

    kineto.start_trace = start_trace_here
    for cls in (kineto, profile):
        stop = cls.__dict__["stop"]

        def stop_here(self, _stop=stop):
            _started_here(self)
            _stop(self)
            self._openmtia_thread = None

        cls.stop = stop_here


def install():
    from torch.profiler import profiler

    get = profiler._KinetoProfile._get_distributed_info
    if getattr(get, "_openmtia", False):
        return
    _guard_threads(profiler)

    def _get_distributed_info(self):
        info = get(self)
        if info:
            config = _mtia_backend_config(info, self.activities)
            if config:
                info["backend"] = config
        return info

    _get_distributed_info._openmtia = True
    profiler._KinetoProfile._get_distributed_info = _get_distributed_info
