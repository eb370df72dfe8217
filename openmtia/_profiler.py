"""torch.profiler on mtia: the trace's ``distributedInfo`` names the
backend as a real MTIA's trace does.

torch writes ``dist.get_backend()``, which for ``init_process_group()``
without a backend is "undefined" and with ``device_id`` the bare plugin name
"openmtia": neither says which device it serves. A real MTIA trace says
"mtia:hccl,cpu:gloo", a device:backend list. A profile of mtia work
(``ProfilerActivity.MTIA``) on a group whose mtia tensors go to openmtia
writes the group's device:backend list instead ("cpu:gloo,mtia:openmtia").
Any other profile, and a backend given as such a list, keeps torch's."""
import torch


def _mtia_backend_config(info, activities):
    import torch.distributed as dist

    if torch.profiler.ProfilerActivity.MTIA not in activities or ":" in str(info["backend"]):
        return None
    config = dist.get_backend_config()
    return config if "mtia:openmtia" in config.split(",") else None


def install():
    from torch.profiler import profiler

    get = profiler._KinetoProfile._get_distributed_info
    if getattr(get, "_openmtia", False):
        return

    def _get_distributed_info(self):
        info = get(self)
        if info:
            config = _mtia_backend_config(info, self.activities)
            if config:
                info["backend"] = config
        return info

    _get_distributed_info._openmtia = True
    profiler._KinetoProfile._get_distributed_info = _get_distributed_info
