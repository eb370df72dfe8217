"""Shows that mtia ops are asynchronous: a 2048x2048 matmul returns to Python
long before it has finished; the result is correct after synchronize."""
import time

import torch


def main():
    a = torch.randn(2048, 2048, device="mtia")
    b = torch.randn(2048, 2048, device="mtia")
    c = a @ b  # warm-up (plans, allocation)
    torch.mtia.synchronize()
    t0 = time.perf_counter()
    c = a @ b
    t_enqueue = time.perf_counter() - t0
    running = not torch.mtia.current_stream().query()
    torch.mtia.synchronize()
    t_total = time.perf_counter() - t0
    ok = torch.allclose(c.cpu(), a.cpu() @ b.cpu(), rtol=1e-4, atol=1e-3)
    print(f"matmul 2048x2048 on mtia: returned after {t_enqueue * 1e3:.3f} ms, still running then: {running}; "
          f"finished after {t_total * 1e3:.1f} ms ({t_total / t_enqueue:.0f}x the enqueue time); "
          f"result correct after synchronize: {ok}")
    return 0 if ok and running and t_enqueue < t_total / 10 else 1


if __name__ == "__main__":
    raise SystemExit(main())
