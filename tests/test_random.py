"""Device randomness: every random op draws from the mtia generator."""
import pytest
import torch

RANDOM_OPS = {
    "rand": lambda g: torch.rand(64, device="mtia", generator=g),
    "randn": lambda g: torch.randn(64, device="mtia", generator=g),
    "randint": lambda g: torch.randint(0, 1000, (64,), device="mtia", generator=g),
    "normal_": lambda g: torch.empty(64, device="mtia").normal_(generator=g),
    "uniform_": lambda g: torch.empty(64, device="mtia").uniform_(generator=g),
    "bernoulli": lambda g: torch.bernoulli(torch.full((64,), 0.5, device="mtia"), generator=g),
    "randperm": lambda g: torch.randperm(64, device="mtia", generator=g),
    "multinomial": lambda g: torch.multinomial(torch.ones(64, device="mtia"), 16, generator=g),
    "exponential_": lambda g: torch.empty(64, device="mtia").exponential_(generator=g),
}


def dropout(_g):
    return torch.nn.functional.dropout(torch.ones(64, device="mtia"), 0.5, training=True)


@pytest.mark.parametrize("name", list(RANDOM_OPS) + ["dropout"])
def test_seeded_reproducible_and_independent_of_cpu(name):
    fn = RANDOM_OPS.get(name, dropout)
    torch.mtia.manual_seed(1234)
    a = fn(None).cpu()
    torch.manual_seed(999)  # the CPU generator must not matter...
    torch.mtia.manual_seed(1234)
    torch.rand(10)
    b = fn(None).cpu()
    assert torch.equal(a, b)
    torch.mtia.manual_seed(4321)  # ... the mtia one must
    assert not torch.equal(fn(None).cpu(), a)


@pytest.mark.parametrize("name", list(RANDOM_OPS))
def test_explicit_generator_and_state_replay(name):
    fn = RANDOM_OPS[name]
    g = torch.Generator(device="mtia").manual_seed(7)
    state = g.get_state()
    a = fn(g).cpu()
    g.set_state(state)
    assert torch.equal(fn(g).cpu(), a)
    torch.mtia.manual_seed(0)
    s = torch.mtia.get_rng_state()
    x = fn(None).cpu()
    torch.mtia.set_rng_state(s)
    assert torch.equal(fn(None).cpu(), x)


def test_devices_have_independent_generators():
    torch.mtia.manual_seed_all(3)
    a = torch.rand(8, device="mtia:0").cpu()
    torch.rand(1000, device="mtia:1")
    torch.mtia.manual_seed_all(3)
    torch.rand(1000, device="mtia:1")
    torch.rand(1000, device="mtia:1")
    assert torch.equal(torch.rand(8, device="mtia:0").cpu(), a)
    assert torch.mtia.default_generators[1].initial_seed() == 3
