"""Checks the norm tests share: each element of a result as close to the
float64 one as CPU's, give or take a rounding."""
import torch


def close_as_cpu(got, cpu, exact, terms, dtype):
    """Each element of got within |cpu - exact| + eps * (|exact| + terms) of
    exact (terms: the magnitudes the formula cancels), where exact is finite."""
    bound = (cpu.double() - exact).abs() + torch.finfo(dtype).eps * (exact.abs() + terms)
    keep = exact.isfinite()
    assert bool(((got.double() - exact).abs() <= bound)[keep].all())


def parameter_grads_close_as_cpu(got, cpu, exact, mask, dtype):
    """The weight and bias gradients (got[1], got[2], where mask asks for
    them; else None on both): sums over rows, each as close to the float64
    result as CPU's, give or take one rounding."""
    for i in (1, 2):
        if not mask[i]:
            assert got[i] is None and cpu[i] is None
            continue
        assert got[i].dtype == dtype and got[i].shape == exact[i].shape
        bound = (cpu[i].double() - exact[i]).abs() + torch.finfo(dtype).eps * exact[i].abs()
        assert bool(((got[i].double() - exact[i]).abs() <= bound).all())
