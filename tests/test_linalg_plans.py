"""What PyTorch's test_linalg found wrong on mtia, each against CPU (issue 22):
results' conj bits kept through plans, every warning once per call, value
checks at the call. Each runs a signature's first call and later ones."""
import warnings

import pytest
import torch


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
@pytest.mark.parametrize("batch", [(), (2,), (3, 2)])
def test_solve_right_side_keeps_the_conjugate_bit(dtype, batch):
    torch.manual_seed(0)
    A = torch.randn(*batch, 4, 4, dtype=dtype)
    B = torch.randn(*batch, 3, 4, dtype=dtype)
    want = torch.linalg.solve(A, B, left=False)
    for _ in range(3):  # the first call of the signature, and planned ones
        got = torch.linalg.solve(A.to("mtia"), B.to("mtia"), left=False)
        assert got.is_conj() == want.is_conj()
        torch.testing.assert_close(got.cpu(), want)
        raw = torch.ops.aten._linalg_solve_ex(A.to("mtia"), B.to("mtia"), left=False)[0]
        assert raw.is_conj() == torch.ops.aten._linalg_solve_ex(A, B, left=False)[0].is_conj()
        torch.testing.assert_close(raw.cpu(), want)


def resized_out(fn, device):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn(device)
        if device == "mtia":
            torch.mtia.synchronize()
    return [str(x.message) for x in w if "was resized" in str(x.message)]


@pytest.mark.parametrize("name,fn", [
    ("cholesky_inverse", lambda d: torch.cholesky_inverse(torch.eye(3, device=d), out=torch.empty(5, device=d))),
    ("inv", lambda d: torch.linalg.inv(torch.eye(3, device=d), out=torch.empty(5, device=d))),
    ("add", lambda d: torch.add(torch.ones(3, device=d), 1, out=torch.empty(2, device=d))),
    ("mm", lambda d: torch.mm(torch.ones(2, 3, device=d), torch.ones(3, 2, device=d), out=torch.empty(5, device=d))),
])
def test_an_out_resize_warns_once_per_call_like_cpu(name, fn):
    want = resized_out(fn, "cpu")
    assert len(want) == 1
    for _ in range(3):
        assert resized_out(fn, "mtia") == want


def test_eig_of_non_finite_input_raises_at_the_call():
    for value in (float("nan"), float("inf")):
        x = torch.eye(3)
        x[0, 0] = value
        with pytest.raises(RuntimeError, match="input tensor should not contain infs or NaNs"):
            torch.linalg.eig(x)
        for _ in range(2):
            with pytest.raises(RuntimeError, match="input tensor should not contain infs or NaNs"):
                torch.linalg.eig(x.to("mtia"))  # at the call, not at a later sync
    torch.mtia.synchronize()  # nothing left over
    w, v = torch.linalg.eig(torch.eye(3, device="mtia") * 2)
    torch.testing.assert_close(w.cpu(), torch.full((3,), 2.0 + 0j))


@pytest.mark.parametrize("call", [
    lambda d: torch.linalg.cholesky(-torch.eye(3, device=d)),
    lambda d: torch.linalg.inv(torch.zeros(3, 3, device=d)),
    lambda d: torch.linalg.cholesky_ex(-torch.eye(3, device=d), check_errors=True),
])
def test_failed_factorizations_raise_at_the_call_like_cpu(call):
    with pytest.raises(torch.linalg.LinAlgError) as cpu:
        call("cpu")
    for _ in range(2):
        with pytest.raises(torch.linalg.LinAlgError) as mtia:
            call("mtia")
        assert str(mtia.value) == str(cpu.value)
    torch.mtia.synchronize()


def test_an_out_kernel_that_sets_its_outputs_conj_bit_sets_the_device_tensors():
    # linalg_lu_solve(left=False) solves with a conjugate view of its out=
    # tensor and leaves the conj bit set on it (CPU's out tensor has it after
    # the call): the mtia out tensor must carry it too, at the first call and
    # later ones (the bytes alone are the conjugate of the answer)
    torch.manual_seed(0)
    A = torch.randn(3, 3, dtype=torch.complex64)
    LU, piv = torch.linalg.lu_factor(A)
    for n in (4, 4, 2):  # a first call, a planned one, another signature
        B = torch.randn(n, 3, dtype=torch.complex64)
        want = torch.empty(n, 3, dtype=torch.complex64)
        torch.linalg.lu_solve(LU, piv, B, left=False, out=want)
        got = torch.empty(n, 3, dtype=torch.complex64, device="mtia")
        torch.linalg.lu_solve(LU.to("mtia"), piv.to("mtia"), B.to("mtia"), left=False, out=got)
        assert got.is_conj() == want.is_conj() == True  # noqa: E712
        torch.testing.assert_close(got.cpu(), want)
        torch.testing.assert_close(got.cpu() @ A, B)
