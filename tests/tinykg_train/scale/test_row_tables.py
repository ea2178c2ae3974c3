"""RowTables: SparseAdam's updates on the device and offloaded, state round trips, memory, errors."""

from __future__ import annotations

import pytest
import torch

from tinykg_train.errors import ConfigError, TinyKGError
from tinykg_train.scale import RowTables

MODES = {
    "on-device": {},
    "offloaded": {"offload": True, "cache_rows": 300},
    "offloaded, growing cache": {"offload": True},
}


def _tables(kit, **mode) -> RowTables:
    return RowTables(
        kit.initial_tables(), device="cpu", lr=kit.LR, betas=kit.BETAS, eps=kit.EPS, **mode
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("lookahead", [0, 2])
def test_row_tables_give_sparse_adams_bits_for_nn_embedding_sparse(kit, mode, lookahead):
    steps = kit.make_steps(40)
    with _tables(kit, **MODES[mode]) as tables:
        kit.train(tables, steps, lookahead=lookahead)
        state = tables.state_dict()["tables"]
    embeddings, optimizer = kit.train_reference(kit.initial_tables(), steps)
    for name, embedding in embeddings.items():
        reference = optimizer.state[embedding.weight]
        assert torch.equal(state[name]["weight"], embedding.weight.data), name
        assert torch.equal(state[name]["exp_avg"], reference["exp_avg"]), name
        assert torch.equal(state[name]["exp_avg_sq"], reference["exp_avg_sq"]), name
        assert int(state[name]["step"]) == reference["step"], name
    # the relation table was left out of some steps and got no gradient in others: fewer updates
    assert int(state["relation"]["step"]) < int(state["user"]["step"]) == 40


@pytest.mark.parametrize("mode", MODES)
def test_a_dense_leaf_gradient_updates_every_gathered_row(kit, mode):
    weights = kit.initial_tables()
    ids = [torch.tensor([5, 1, 5, 900]), torch.tensor([3, 1, 2000]), torch.tensor([7])]
    with _tables(kit, **MODES[mode]) as tables:
        for k, step_ids in enumerate(ids):
            rows = tables.gather({"entity": step_ids})
            (rows.leaves["entity"] * (k + 1.5)).sin().sum().backward()
            tables.step(rows)
        ours = tables.table("entity").clone()
    embedding = torch.nn.Embedding.from_pretrained(
        weights["entity"].clone(), freeze=False, sparse=True
    )
    optimizer = torch.optim.SparseAdam([embedding.weight], lr=kit.LR, betas=kit.BETAS, eps=kit.EPS)
    for k, step_ids in enumerate(ids):
        optimizer.zero_grad()
        (embedding(torch.unique(step_ids)) * (k + 1.5)).sin().sum().backward()
        optimizer.step()
    assert torch.equal(ours, embedding.weight.data)


@pytest.mark.parametrize(
    "offloaded",
    [
        {"cache_rows": 300},
        {"cache_rows": 300, "lookahead": 3},
        {"cache_rows": 200, "lookahead": 1},
        {"cache_rows": None, "lookahead": 2},
    ],
    ids=[
        "small cache",
        "small cache + look-ahead 3",
        "tiny cache + look-ahead 1",
        "growing cache + look-ahead 2",
    ],
)
def test_offloaded_tables_train_to_the_same_bits_as_on_device(kit, offloaded):
    offloaded = dict(offloaded)
    lookahead = offloaded.pop("lookahead", 0)
    steps = kit.make_steps(120, seed=3)
    with _tables(kit) as resident, _tables(kit, offload=True, **offloaded) as cached:
        kit.train(resident, steps)
        kit.train(cached, steps, lookahead=lookahead)
        kit.assert_same_state(resident.state_dict(), cached.state_dict())
        stats = cached.stats()
    for name in ("user", "entity"):  # caches smaller than these tables: every path is exercised
        assert stats[name]["capacity"] < kit.SIZES[name][0]
        assert stats[name]["hits"] > 0, stats[name]
        assert stats[name]["evicted"] > 0 and stats[name]["written_back"] > 0, stats[name]
        copied_in = "prefetched" if lookahead else "misses"  # by the look-ahead, or by the gather
        assert stats[name][copied_in] > 0, stats[name]
    assert stats["all"]["hints_mismatched"] == 0


@pytest.mark.parametrize(
    ("saved_mode", "loaded_mode"),
    [("offloaded", "offloaded"), ("offloaded", "on-device"), ("on-device", "offloaded")],
)
def test_state_dict_round_trip_mid_training_continues_identically(
    kit, tmp_path, saved_mode, loaded_mode
):
    steps = kit.make_steps(50, seed=5)
    with _tables(kit) as uninterrupted:
        kit.train(uninterrupted, steps)
        expected = uninterrupted.state_dict()
    with _tables(kit, **MODES[saved_mode]) as first:
        kit.train(first, steps[:23], lookahead=2)
        torch.save(first.state_dict(), tmp_path / "tables.pt")
    with _tables(
        kit, **MODES[loaded_mode]
    ) as resumed:  # fresh tables: their initial values are overwritten
        resumed.load_state_dict(torch.load(tmp_path / "tables.pt", weights_only=True))
        kit.train(resumed, steps[23:], lookahead=2)
        kit.assert_same_state(expected, resumed.state_dict())


def test_offloaded_device_bytes_are_bounded_by_cache_rows_not_table_size():
    dim, cache_rows = 8, 256
    per_table_device = 3 * cache_rows * dim * 4  # weight, exp_avg, exp_avg_sq rows in the cache
    for rows in (10_000, 200_000):
        tables = RowTables(
            {"entity": torch.randn(rows, dim)},
            device="cpu",
            lr=0.01,
            offload=True,
            cache_rows=cache_rows,
        )
        for seed in range(5):
            ids = torch.randint(0, rows, (200,), generator=torch.Generator().manual_seed(seed))
            batch = tables.gather({"entity": ids})
            batch("entity", ids).sum().backward()
            tables.step(batch)
        memory = tables.memory()
        assert (
            memory["device"]
            == memory["device_tables"] + memory["device_optimizer"]
            == per_table_device
        )
        assert memory["host_tables"] == rows * dim * 4
        assert memory["host_optimizer"] == 2 * rows * dim * 4
        assert memory["host"] > 3 * rows * dim * 4  # plus the slot index
        resident = RowTables({"entity": torch.randn(rows, dim)}, device="cpu", lr=0.01).memory()
        assert resident["device"] == 3 * rows * dim * 4 and resident["host"] == 0


def test_a_growing_cache_settles_at_what_a_step_and_the_look_ahead_pin(kit):
    steps = kit.make_steps(40)
    with _tables(kit, offload=True) as tables:
        kit.train(tables, steps, lookahead=2)
        stats, memory = tables.stats(), tables.memory()
    most_rows = max(int(torch.unique(s.needed["entity"]).numel()) for s in steps)
    assert stats["entity"]["grown"] >= 1
    assert (
        3 * most_rows <= stats["entity"]["capacity"] <= 2 * 3 * most_rows
    )  # (1 + look-ahead) steps
    assert memory["device_tables"] == sum(
        stats[n]["capacity"] * kit.SIZES[n][1] * 4 for n in kit.SIZES
    )


def test_a_fixed_cache_too_small_for_a_step_names_the_smallest_that_works():
    tables = RowTables(
        {"entity": torch.randn(100, 4)}, device="cpu", lr=0.01, offload=True, cache_rows=10
    )
    tables.step(tables.gather({"entity": torch.arange(5)}))  # rows 0..4 cached: hits below
    with pytest.raises(
        TinyKGError,
        match=r"cache_rows=10 is too small for table 'entity'.*needs 30 of its rows.*use cache_rows >= 30",
    ):
        tables.gather({"entity": torch.arange(30)})
    assert tables._stores["entity"].pinned() == 0  # the failed gather left nothing pinned
    rows = tables.gather({"entity": torch.arange(10)})
    tables.step(rows)


def test_lookups_outside_the_gathered_ids_and_unknown_tables_are_refused(kit):
    tables = _tables(kit, offload=True, cache_rows=50)
    rows = tables.gather({"entity": torch.tensor([1, 2, 3])})
    with pytest.raises(TinyKGError, match="did not gather; add them"):
        rows("entity", torch.tensor([2, 4]))
    with pytest.raises(TinyKGError, match="table 'user' was not gathered"):
        rows("user", torch.tensor([0]))
    with pytest.raises(TinyKGError, match="unknown embedding table 'items'"):
        tables.gather({"items": torch.tensor([0])})
    with pytest.raises(TinyKGError, match=r"range over \[-1, 3\].*pass ids in \[0, 2999\]"):
        tables.gather({"entity": torch.tensor([-1, 3])})
    with pytest.raises(TinyKGError, match="must be an integer tensor"):
        tables.prefetch({"entity": torch.tensor([1.0])})
    tables.step(rows)
    with pytest.raises(TinyKGError, match="already stepped"):
        tables.step(rows)


def test_settings_that_cannot_work_are_one_line_config_errors():
    table = {"entity": torch.randn(10, 4)}
    with pytest.raises(ConfigError, match="pass offload=True or drop it"):
        RowTables(table, device="cpu", lr=0.1, cache_rows=5)
    with pytest.raises(ConfigError, match="'cache_rows' must be a positive integer"):
        RowTables(table, device="cpu", lr=0.1, offload=True, cache_rows=0)
    with pytest.raises(ConfigError, match="'lr' must be positive"):
        RowTables(table, device="cpu", lr=0.0)
    with pytest.raises(ConfigError, match="2-D floating-point"):
        RowTables({"entity": torch.arange(10)}, device="cpu", lr=0.1)
    with pytest.raises(ConfigError, match="'moments' must be one of float32, bfloat16"):
        RowTables(table, device="cpu", lr=0.1, moments="rowwise")


def test_load_state_dict_refuses_other_tables_and_pending_steps(kit):
    tables = _tables(kit, offload=True, cache_rows=300)
    state = tables.state_dict()
    with pytest.raises(TinyKGError, match=r"must hold tables \['entity', 'relation', 'user'\]"):
        tables.load_state_dict({"tables": {"entity": state["tables"]["entity"]}})
    with pytest.raises(TinyKGError, match=r"state of table 'entity' must hold \['weight'"):
        tables.load_state_dict({"tables": {**state["tables"], "entity": {"weight": None}}})
    wrong = {name: dict(entry) for name, entry in state["tables"].items()}
    wrong["user"]["weight"] = torch.zeros(3, 8)
    with pytest.raises(TinyKGError, match=r"state of table 'user' has weight of shape \(3, 8\)"):
        tables.load_state_dict({"tables": wrong})
    rows = tables.gather({"user": torch.tensor([1])})
    with pytest.raises(TinyKGError, match="steps or prefetch hints are pending"):
        tables.load_state_dict(state)
    tables.step(rows)
    tables.prefetch({"user": torch.tensor([2])})
    with pytest.raises(TinyKGError, match="call cancel_prefetch"):
        tables.load_state_dict(state)
    tables.cancel_prefetch()
    tables.load_state_dict(state)
    tables.close()


@pytest.mark.cuda
def test_on_a_gpu_offloaded_tables_sit_in_pinned_memory_and_match_on_device_bits(kit):
    steps = kit.make_steps(80, seed=7)
    settings = {"device": "cuda", "lr": kit.LR, "betas": kit.BETAS, "eps": kit.EPS}
    with (
        RowTables(kit.initial_tables(), **settings) as resident,
        RowTables(kit.initial_tables(), **settings, offload=True, cache_rows=300) as cached,
    ):
        kit.train(resident, steps)
        kit.train(cached, steps, lookahead=3)
        assert all(cached.table(name).is_pinned() for name in kit.SIZES)
        kit.assert_same_state(resident.state_dict(), cached.state_dict())
        capacities = {name: min(300, rows) for name, (rows, _) in kit.SIZES.items()}
        assert cached.memory()["device"] == sum(
            3 * capacities[name] * dim * 4 for name, (_, dim) in kit.SIZES.items()
        )
        state = resident.state_dict()["tables"]
    embeddings, _ = kit.train_reference(kit.initial_tables(), steps, device="cuda")
    for name, embedding in embeddings.items():  # CUDA's sparse kernels may sum in another order
        torch.testing.assert_close(state[name]["weight"], embedding.weight.data)


@pytest.mark.parametrize("lookahead", [0, 2])
def test_emptying_the_caches_between_steps_keeps_the_on_device_bits(kit, lookahead):
    steps = kit.make_steps(60, seed=5)
    with _tables(kit) as resident, _tables(kit, offload=True) as cached:
        kit.train(resident, steps)
        for part in (steps[:20], steps[20:45], steps[45:]):  # emptied as before an evaluation
            kit.train(cached, part, lookahead=lookahead)
            assert sorted(cached.empty_caches()) == sorted(kit.SIZES)
            assert cached.memory()["device"] == 0
        kit.assert_same_state(resident.state_dict(), cached.state_dict())
        assert resident.empty_caches() == []  # on the device: nothing to give up
        assert cached.stats()["entity"]["emptied"] == 3


def _decoded_moments(state: dict) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    def widened(bits):
        return bits.view(torch.bfloat16).float() if bits.dtype == torch.int16 else bits

    return {
        name: (widened(entry["exp_avg"]), widened(entry["exp_avg_sq"]))
        for name, entry in state["tables"].items()
    }


def test_bfloat16_moments_halve_the_state_and_track_float32_adam(kit):
    """Both moments kept as bfloat16 bits: half the optimizer bytes, and after 60 steps the
    weights and moments within a few percent (by norm) of SparseAdam's float32 run: what 60
    stochastic roundings to bfloat16's 8 bits amount to (about 1% here)."""
    steps = kit.make_steps(60, seed=7)
    with _tables(kit) as plain, _tables(kit, moments="bfloat16", seed=3) as compact:
        kit.train(plain, steps)
        kit.train(compact, steps)
        assert compact.memory()["device_optimizer"] * 2 == plain.memory()["device_optimizer"]
        exact, rounded = plain.state_dict(), compact.state_dict()
    exact_moments, rounded_moments = _decoded_moments(exact), _decoded_moments(rounded)
    initial = kit.initial_tables()
    for name, entry in rounded["tables"].items():
        assert entry["exp_avg"].dtype == entry["exp_avg_sq"].dtype == torch.int16
        assert entry["weight"].dtype == torch.float32
        assert int(entry["step"]) == int(exact["tables"][name]["step"])
        moved = exact["tables"][name]["weight"] - initial[name]
        difference = entry["weight"] - exact["tables"][name]["weight"]
        assert 0 < difference.norm() < 0.05 * moved.norm(), name
        for ours, theirs in zip(rounded_moments[name], exact_moments[name], strict=True):
            assert (ours - theirs).norm() < 0.03 * theirs.norm(), name


def test_bfloat16_moments_give_the_same_bits_offloaded_and_after_a_resume(kit, tmp_path):
    steps = kit.make_steps(80, seed=9)
    compact = {"moments": "bfloat16", "seed": 4}
    with _tables(kit, **compact) as resident:
        kit.train(resident, steps)
        expected = resident.state_dict()
    with _tables(kit, offload=True, cache_rows=200, **compact) as cached:
        kit.train(cached, steps[:37], lookahead=2)
        torch.save(cached.state_dict(), tmp_path / "tables.pt")
        assert cached.stats()["entity"]["evicted"] > 0
    with _tables(kit, offload=True, cache_rows=200, **compact) as resumed:
        resumed.load_state_dict(torch.load(tmp_path / "tables.pt", weights_only=True))
        kit.train(resumed, steps[37:], lookahead=2)
        kit.assert_same_state(expected, resumed.state_dict())
    with _tables(kit, moments="bfloat16", seed=5) as other_seed:
        kit.train(other_seed, steps)
        moments = other_seed.state_dict()["tables"]["entity"]["exp_avg"]
        assert not torch.equal(moments, expected["tables"]["entity"]["exp_avg"])


def test_a_state_saved_with_other_moments_is_refused(kit):
    with _tables(kit) as plain, _tables(kit, moments="bfloat16") as compact:
        with pytest.raises(TinyKGError, match="resume with the --adam-state it was saved with"):
            compact.load_state_dict(plain.state_dict())
        with pytest.raises(TinyKGError, match=r"holds exp_avg as torch.int16"):
            plain.load_state_dict(compact.state_dict())
