"""The copy matrix: every dtype x stride pattern x direction, bit-exact against CPU."""
import itertools

import pytest
import torch
import openmtia._C_test  # the test-only module (launch_blocking_task, ...)

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64,
          torch.complex64, torch.complex128]

# view patterns applied to a (6, 8) base tensor
PATTERNS = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.t(),
    "sliced": lambda t: t[1:5:2, ::3],
    "expanded": lambda t: t[2:3, :].expand(5, 8),
    "zero_size": lambda t: t[:, 0:0],
    "storage_offset": lambda t: t[2:, 3:],
    "offset_contiguous": lambda t: t.reshape(-1)[5:29],
    "scalar": lambda t: t[1, 2],
}
DIRECTIONS = ["cpu->mtia", "mtia->cpu", "mtia->mtia", "mtia:0->mtia:1"]


def make(dtype, shape=(6, 8), seed=0):
    """Values covering the dtype's range, incl. nan/inf/-0 for floating types."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        real = torch.float64
        t = torch.randn(shape, generator=g, dtype=real) * 100
        flat = t.view(-1)
        flat[0], flat[1], flat[2], flat[3] = float("nan"), float("inf"), -float("inf"), -0.0
        if dtype.is_complex:
            t = torch.complex(t, torch.randn(shape, generator=g, dtype=real))
        return t.to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=g, dtype=torch.int64).to(dtype)


def bits(t):
    """The raw bytes of a tensor's values (so nan == nan, -0 != 0)."""
    t = t.detach().cpu().contiguous().reshape(-1)
    if t.is_complex():
        t = torch.view_as_real(t).reshape(-1)
    return t.view(torch.uint8)


def assert_bit_equal(actual, expected):
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert torch.equal(bits(actual), bits(expected))


def endpoints(direction):
    return {"cpu->mtia": ("cpu", "mtia:0"), "mtia->cpu": ("mtia:0", "cpu"),
            "mtia->mtia": ("mtia:0", "mtia:0"), "mtia:0->mtia:1": ("mtia:0", "mtia:1")}[direction]


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("pattern", list(PATTERNS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_copy_source_patterns(dtype, pattern, direction):
    src_dev, dst_dev = endpoints(direction)
    base = make(dtype)
    expected = PATTERNS[pattern](base)
    src = PATTERNS[pattern](base.to(src_dev))
    assert src.shape == expected.shape and src.stride() == expected.stride()
    # .to(): a fresh destination
    out = src.to(dst_dev)
    assert out.device == torch.device(dst_dev)
    assert_bit_equal(out, expected)
    # copy_ into a destination view of another layout
    def strided_view(b):  # a transposed, offset window of b with expected's shape
        if expected.dim() == 2:
            return b.t()[1:1 + expected.shape[0], 2:2 + expected.shape[1]]
        return b.reshape(-1)[3:3 + expected.numel()].view(expected.shape)

    dst_base = torch.zeros(12, 12, dtype=dtype, device=dst_dev)
    strided_view(dst_base).copy_(src)
    ref_base = torch.zeros(12, 12, dtype=dtype)
    strided_view(ref_base).copy_(expected)
    assert_bit_equal(dst_base, ref_base)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("src_dtype,dst_dtype", list(itertools.product(DTYPES, DTYPES)), ids=str)
def test_copy_with_dtype_conversion(src_dtype, dst_dtype, direction):
    src_dev, dst_dev = endpoints(direction)
    # values every dtype represents without overflow, so conversions are defined
    base = (torch.arange(-20, 28, dtype=torch.float64).reshape(6, 8) / 4).to(src_dtype)
    if src_dtype.is_complex:
        base = base + 1j * torch.ones((), dtype=src_dtype)
    if dst_dtype in (torch.uint8, torch.bool) or src_dtype in (torch.uint8, torch.bool):
        base = base.abs() if src_dtype != torch.bool else base
    for pattern in ("contiguous", "transposed", "expanded"):
        cpu_src = PATTERNS[pattern](base)
        expected = torch.zeros(cpu_src.shape, dtype=dst_dtype)
        expected.copy_(cpu_src)
        dst = torch.zeros(cpu_src.shape, dtype=dst_dtype, device=dst_dev)
        dst.copy_(PATTERNS[pattern](base.to(src_dev)))
        assert_bit_equal(dst, expected)
        assert_bit_equal(PATTERNS[pattern](base.to(src_dev)).to(dst_dev, dst_dtype), cpu_src.to(dst_dtype))


def test_copy_broadcasts_source():
    src = torch.arange(8.0)
    dst = torch.zeros(3, 8, device="mtia")
    dst.copy_(src)
    assert torch.equal(dst.cpu(), src.expand(3, 8))
    dst2 = torch.zeros(3, 8)
    dst2.copy_(src.to("mtia:1"))
    assert torch.equal(dst2, src.expand(3, 8))


def test_copy_into_overlapping_destination_raises():
    dst = torch.zeros(1, device="mtia").expand(4)
    with pytest.raises(RuntimeError, match="more than one element"):
        dst.copy_(torch.arange(4.0))


def test_copy_bad_broadcast_raises():
    with pytest.raises(RuntimeError, match=r"The expanded size of the tensor \(3\) must match the existing size \(4\)"):
        torch.zeros(3, device="mtia").copy_(torch.ones(4))


def test_conj_and_neg_views_are_resolved():
    z = torch.randn(5, dtype=torch.complex64)
    assert torch.equal(z.conj().to("mtia").cpu(), z.conj().resolve_conj())
    assert torch.equal(z.to("mtia").conj().cpu(), z.conj().resolve_conj())
    d = torch.zeros(5, dtype=torch.complex64, device="mtia")
    d.copy_(z.to("mtia").conj())
    assert torch.equal(d.cpu(), z.conj())


class TestNonBlocking:
    def _hold_stream(self, device=0, timeout_s=30.0):
        """Holds the current stream of `device` until the gate is released."""
        import openmtia

        return openmtia._C_test.launch_blocking_task(device, timeout_s)

    @pytest.mark.needs_async
    def test_pinned_h2d_returns_before_the_copy_runs(self):
        src = torch.arange(1 << 16, dtype=torch.float32).pin_memory()
        assert src.is_pinned()
        gate = self._hold_stream()
        dst = src.to("mtia", non_blocking=True)  # must not wait for the held stream
        assert not torch.mtia.current_stream().query()
        gate.release()
        torch.mtia.synchronize()
        assert torch.equal(dst.cpu(), src)

    @pytest.mark.needs_async
    def test_pinned_d2h_returns_before_the_copy_runs(self):
        x = torch.arange(1000, dtype=torch.int64, device="mtia")
        out = torch.zeros(1000, dtype=torch.int64).pin_memory()
        gate = self._hold_stream()
        out.copy_(x, non_blocking=True)
        assert not torch.mtia.current_stream().query()
        assert out.sum().item() == 0  # not copied yet
        gate.release()
        torch.mtia.current_stream().synchronize()
        assert torch.equal(out, torch.arange(1000))

    @pytest.mark.needs_async
    def test_a_non_blocking_copy_from_pageable_memory_is_staged_at_the_call(self):
        # as a driver stages a pageable buffer for its DMA: the bytes are
        # taken at the call, and the copy queues behind the held stream
        src = torch.arange(100.0)
        nc = torch.arange(24.0).view(2, 3, 4).permute(2, 0, 1)  # (not dense: made contiguous first)
        gate = self._hold_stream()
        dst = src.to("mtia", non_blocking=True)
        dst_nc = nc.to("mtia", non_blocking=True)
        assert not torch.mtia.current_stream().query()
        expect, expect_nc = src.clone(), nc.clone()
        src.fill_(-1)  # after the call: not what the device receives
        nc.fill_(-1)
        gate.release()
        assert torch.equal(dst.cpu(), expect)
        assert torch.equal(dst_nc.cpu(), expect_nc)

    @pytest.mark.needs_async
    @pytest.mark.parametrize("how", ["blocking", "over 64 MiB"])
    def test_a_blocking_or_large_copy_from_pageable_memory_waits_for_the_stream(self, how):
        import threading
        import time

        src = torch.arange(100.0) if how == "blocking" else torch.ones((64 << 20) // 4 + 1)
        threading.Timer(0.3, self._hold_stream().release).start()
        t0 = time.perf_counter()
        dst = src.to("mtia", non_blocking=how != "blocking")  # waits until consumed
        assert time.perf_counter() - t0 >= 0.25
        assert torch.mtia.current_stream().query()
        assert torch.equal(dst.cpu(), src)

    def test_non_blocking_with_conversion_is_correct(self):
        src = torch.randn(64, 3).pin_memory()
        dst = src.t().to("mtia", dtype=torch.float64, non_blocking=True)
        torch.mtia.synchronize()
        assert torch.equal(dst.cpu(), src.t().double())


@pytest.mark.needs_async
def test_a_dtype_conversion_on_the_device_takes_its_operands_at_the_call():
    # .to(dtype) and a converting copy_ of contiguous tensors take the
    # elements at the call: metadata the host changes afterwards (t_(),
    # resize_, set_) does not change what the queued task converts
    import openmtia
    a = torch.randn(6, 5)
    x = a.to("mtia")
    dst = torch.empty(6, 5, dtype=torch.float64, device="mtia")
    torch.mtia.synchronize()
    gate = openmtia._C_test.launch_blocking_task(0)
    try:
        half = x.to(torch.bfloat16)
        dst.copy_(x)
        ints = (x * 100).to(torch.int32)
        assert not torch.mtia.current_stream().query()
        x.t_()
        dst_view = dst.view(30)
        x.resize_(2)
        x.set_(torch.zeros(3, device="mtia"))
    finally:
        gate.release()
    assert torch.equal(half.cpu(), a.to(torch.bfloat16))
    assert torch.equal(dst_view.cpu(), a.to(torch.float64).view(30))
    assert torch.equal(ints.cpu(), (a * 100).to(torch.int32))


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("n", [7, 16, 33, 1000, 65536 + 9])
def test_float32_low_precision_casts_on_the_device_as_on_cpu(low, n):
    # mtia -> mtia casts between float32 and bf16/fp16 run the vector loops:
    # rounding to nearest even, overflow to inf, subnormals, signed zeros and
    # NaNs (a signaling NaN whose payload sits in the low 16 bits stays NaN,
    # not bf16's inf), at every position of the vectors and the tail
    specials = torch.tensor([0x7F800001, 0x7FC00000, 0xFF800001, 0x7F7FFFFF, 0x00000001, 0x80000000, 0x3F808000,
                             0x3F818000, 0x477FF000, 0x477FEFFF, 0x33800000, 0x387FC000], dtype=torch.int64)
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 1000
    bits = x.view(torch.int32)
    for start in range(0, n, max(1, n // 5)):
        k = min(len(specials), n - start)
        bits[start:start + k] = specials[:k].to(torch.int32)
    for src, dst in ((x, low), (x.to(low), torch.float32)):
        expected = src.to(dst)
        got = src.to("mtia").to(dst).cpu()
        assert torch.equal(got.isnan(), expected.isnan())
        keep = ~expected.isnan()
        int_type = torch.int16 if dst != torch.float32 else torch.int32
        assert torch.equal(got[keep].view(int_type), expected[keep].view(int_type))
