"""TrainingMode("auto")'s choice (mpiflow.train.mode_choice): each mode's step priced from
the bytes and updates mode_cost counts and a measured link, the cheapest that fits a
worker's memory taken, and the reason said."""

import pytest

import mpiflow as mf
from mpiflow.train import mode_choice
from mpiflow.train.mode_cost import ModelShape

MiB = 2 ** 20
# 1 GB/s point-to-point, 2 GB/s allreduce bus, 10 us latencies, 1 ns per element updated
LINK = mode_choice.Link(allreduce_latency_s=10e-6, allreduce_s_per_byte=0.5e-9,
                        message_latency_s=10e-6, receive_s_per_byte=1e-9,
                        update_s_per_element=1e-9)
PLENTY = float("inf")


def test_a_ps_step_waits_for_the_slower_of_the_worker_and_the_ps_serving_every_worker():
    shape = ModelShape(dense_bytes=4 * MiB, table_bytes=0, row_bytes=0, ids_per_step=0,
                       slots=0)
    # The ps moves the 8 MiB of a pull and a push and updates 1 Mi elements per worker
    # step: with one worker that outweighs the worker's own 8 MiB and two exchanges.
    one = mode_choice.predict_seconds("ps", shape, 1, 1, LINK, PLENTY)
    assert one.seconds == pytest.approx(8 * MiB * 1e-9 + MiB * 1e-9)
    four = mode_choice.predict_seconds("ps", shape, 4, 1, LINK, PLENTY)
    assert four.seconds == pytest.approx(4 * one.seconds)
    assert "the ps serving every worker" in four.why
    # A tiny model: the latency of its two exchanges (a pull and a push), on the worker,
    # is what a step waits for.
    tiny = mode_choice.predict_seconds("ps", ModelShape(64, 0, 0, 0, 0), 1, 1, LINK, PLENTY)
    assert tiny.seconds == pytest.approx(2 * 10e-6 + 128 * 1e-9)


def test_allreduce_pays_the_allreduce_and_updates_every_variable_on_every_worker():
    shape = ModelShape(4 * MiB, 0, 0, 0, slots=1)
    got = mode_choice.predict_seconds("allreduce", shape, 4, 0, LINK, PLENTY)
    assert got.seconds == pytest.approx(10e-6 + 4 * MiB * 0.5e-9 + 2 * MiB * 1e-9)


def test_a_dense_model_on_many_workers_allreduces_rather_than_crowd_one_ps():
    shape = ModelShape(40 * MiB, 0, 0, 0, slots=2)
    choice = mode_choice.choose(shape, 8, 1, LINK, PLENTY)
    assert choice.mode == "allreduce"
    assert "hybrid" not in choice.predictions       # no table: hybrid would be allreduce
    assert "no table" in choice.reason
    # the launch's ps rank is left idle: the reason says how to make it a worker
    assert "the launch's 1 ps task(s) will only wait: launch with --ps 0" in choice.reason


def test_a_big_table_touched_in_few_rows_goes_to_the_ps_and_the_dense_part_is_allreduced():
    shape = ModelShape(dense_bytes=8 * MiB, table_bytes=2048 * MiB, row_bytes=256,
                       ids_per_step=8192, slots=1)
    choice = mode_choice.choose(shape, 8, 2, LINK, memory_per_worker=1024 * MiB)
    assert choice.mode == "hybrid"
    assert "allreduce left out: a worker's state would not fit its 1024 MiB share" \
        in choice.reason
    roomy = mode_choice.choose(shape, 8, 2, LINK, PLENTY)
    # with the memory, allreduce still gathers every worker's rows and applies them all
    assert roomy.predictions["hybrid"].seconds < roomy.predictions["allreduce"].seconds


def test_one_worker_beside_a_ps_lets_the_ps_apply_a_model_too_slow_to_update_locally():
    slow_updates = mode_choice.Link(10e-6, 0.5e-9, 10e-6, 0.1e-9, update_s_per_element=50e-9)
    choice = mode_choice.choose(ModelShape(1 * MiB, 0, 0, 0, 0), 1, 1, slow_updates, PLENTY)
    assert choice.mode == "ps"   # a worker alone updates 256 Ki elements; the ps does it
    assert choice.reason.startswith("ps adds the least to a step")


def test_candidates_limit_the_choice_and_without_a_ps_only_allreduce_runs():
    shape = ModelShape(1 * MiB, 64 * MiB, 64, 1024, 1)
    assert mode_choice.choose(shape, 4, 1, LINK, PLENTY, candidates=["ps"]).mode == "ps"
    assert mode_choice.choose(shape, 4, 0, LINK, PLENTY).mode == "allreduce"
    with pytest.raises(mf.errors.InvalidArgumentError, match="no ps task"):
        mode_choice.choose(shape, 4, 0, LINK, PLENTY, candidates=["hybrid"])


def test_the_model_shape_comes_from_the_gradients():
    with mf.Graph().as_default():
        ids = mf.placeholder(mf.int64, [32])
        free = mf.placeholder(mf.int64, [None])
        table = mf.get_variable("emb", [100, 8])
        other = mf.get_variable("emb2", [50, 8])
        w = mf.get_variable("w", [8, 2])
        h = mf.nn.embedding_lookup(table, ids)
        loss = mf.reduce_sum(mf.matmul(h, w)) + mf.reduce_sum(
            mf.nn.embedding_lookup(other, free))
        pairs = mf.train.AdamOptimizer(0.1).compute_gradients(loss)
    shape = mode_choice.model_shape(pairs, mf.train.AdamOptimizer.slots_per_variable)
    assert shape == ModelShape(dense_bytes=8 * 2 * 4, table_bytes=150 * 8 * 4, row_bytes=32,
                               ids_per_step=32 + mode_choice.ASSUMED_IDS, slots=2)


def test_a_rank_alone_measures_its_own_copies_and_updates():
    link = mode_choice.measure(None, 1 * MiB)
    assert link.receive_s_per_byte > 0 and link.update_s_per_element > 0
    assert mode_choice.Link.from_array(link.as_array()).describe() == link.describe()


class _AnySession:
    """Stands in for a session to a ps: its runs take the time ``_best_of`` says."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def run(self, *args, **kwargs):
        return None


def test_a_ps_round_trip_measured_slower_than_the_transfers_leaves_them_a_cost(monkeypatch):
    # A tiny run that met a busy ps (the others probing it, a step being served) took
    # longer than the big pull and push: subtracted as it was, the path would cost
    # nothing per byte and ps mode would look cheapest at any size.
    monkeypatch.setattr(mf, "Session", _AnySession)
    times = iter([3e-3, 1e-3, 1.5e-3])            # tiny run, pull, push
    monkeypatch.setattr(mode_choice, "_best_of", lambda call, repeats=3: next(times))
    monkeypatch.setattr(mode_choice, "_after_work", lambda call: 0.5e-3)
    round_trip, per_byte, busy = mode_choice._through_ps("", 0, 1 * MiB)
    assert round_trip == 1e-3
    assert per_byte == pytest.approx(0.5e-3 / (2 * MiB))
    assert busy == 1e-3         # never less than the idle round trip


def test_the_busy_round_trip_is_what_a_step_pays_on_average(monkeypatch):
    # Where the ps shares the cores a round trip takes 0.1 ms or 3 ms as the scheduler
    # happens to give the ps a core: the mean of many, not a median of a few, which
    # lands on either side from launch to launch.
    monkeypatch.setattr(mode_choice, "_BUSY_BURST_S", 0.0)
    clock = iter(range(10 ** 6))
    monkeypatch.setattr(mode_choice.time, "perf_counter", lambda: next(clock) * 1e-3)
    waits = iter([0, 2] * mode_choice._BUSY_ROUND_TRIPS)    # ms of each call, in turn
    busy = mode_choice._after_work(lambda: [next(clock) for _ in range(next(waits))])
    ones = (mode_choice._BUSY_ROUND_TRIPS + 1) // 2          # the calls that took 1 ms
    twos = mode_choice._BUSY_ROUND_TRIPS - ones              # and 3 ms
    assert mode_choice._BUSY_ROUND_TRIPS >= 15
    assert busy == pytest.approx((ones * 1e-3 + twos * 3e-3) / mode_choice._BUSY_ROUND_TRIPS)


def test_a_ps_path_costs_its_round_trip_once_and_its_bytes_each_way(monkeypatch):
    monkeypatch.setattr(mf, "Session", _AnySession)
    times = iter([0.2e-3, 1.2e-3, 1.4e-3])
    monkeypatch.setattr(mode_choice, "_best_of", lambda call, repeats=3: next(times))
    monkeypatch.setattr(mode_choice, "_after_work", lambda call: 1.5e-3)
    round_trip, per_byte, busy = mode_choice._through_ps("", 0, 1 * MiB)
    assert round_trip == 0.2e-3
    assert per_byte == pytest.approx(2.2e-3 / (2 * MiB))
    assert busy == 1.5e-3


def test_on_a_crowded_node_a_step_takes_every_ranks_work_over_the_cores():
    """5 ranks on 2 cores: the workers' traffic and updates and the ps's updates take
    their share of the cores together (hybrid: the ps serves a few rows)."""
    shape = ModelShape(8 * MiB, table_bytes=64 * MiB, row_bytes=256, ids_per_step=1024,
                       slots=1)
    spread = mode_choice.choose(shape, 4, 1, LINK, PLENTY).predictions["hybrid"]
    hybrid = mode_choice.choose(shape, 4, 1, LINK, PLENTY, node=(5, 2)).predictions["hybrid"]
    waits = 2 * 10e-6                    # the round trips: no work, the cores go on
    rows_on_the_ps = 1024 * 64 * 1e-9    # the ps's update of the rows a step touched
    assert hybrid.seconds == pytest.approx(
        4 * (spread.seconds - waits + rows_on_the_ps) * 2.5 / 5 + waits)
    assert "on 2.5 ranks per core" in hybrid.why and "its share" not in hybrid.why
    # allreduce leaves the ps rank idle: 4 workers on 2 cores, each step's work twice over
    dense = ModelShape(8 * MiB, 0, 0, 0, slots=1)
    alone = mode_choice.choose(dense, 4, 1, LINK, PLENTY).predictions["allreduce"]
    allreduce = mode_choice.choose(dense, 4, 1, LINK, PLENTY, node=(5, 2)
                                   ).predictions["allreduce"]
    assert "on 2.0 ranks per core" in allreduce.why
    assert allreduce.seconds == pytest.approx(2 * alone.seconds)
    assert "ranks per core" not in mode_choice.choose(dense, 2, 1, LINK, PLENTY, node=(3, 2)
                                                      ).predictions["allreduce"].why


def test_on_a_crowded_node_a_ps_serving_every_worker_on_its_share_of_the_cores_bounds_a_step():
    """A ps is one process: however the work spreads over the cores, it serves the
    workers in turn at its share of them (2 cores, 4 workers and a ps, a table and
    8.5 MiB of dense variables with Adagrad: ps mode ran at 0.71 of hybrid's steps/s,
    which the spread alone priced alike, and auto chose ps)."""
    shape = ModelShape(8 * MiB, 0, 0, 0, slots=1)
    crowded = mode_choice.choose(shape, 4, 1, LINK, PLENTY, node=(5, 2))
    ps = crowded.predictions["ps"]
    # per worker step, the ps moves a pull and a push of 8 MiB and updates 2 Mi elements
    # (the variables and the slot), every worker's in turn, on 1 / 2.5 of a core
    serving = 4 * (16 * MiB * 1e-9 + 2 * 2 * MiB * 1e-9)
    assert ps.seconds == pytest.approx(serving * 2.5)
    assert "the ps serving every worker on its share of the cores" in ps.why
    assert crowded.mode == "allreduce"
    # two ps halve each one's share of the serving
    two = mode_choice.predict_seconds("ps", shape, 4, 2, LINK, PLENTY, node=(6, 2))
    assert two.seconds == pytest.approx(serving / 2 * 3)


def test_ids_per_step_given_by_the_user_replace_the_lookups_unknown_batch():
    with mf.Graph().as_default():
        ids = mf.placeholder(mf.int64, [None])
        table = mf.get_variable("emb", [100, 8])
        loss = mf.reduce_sum(mf.nn.embedding_lookup(table, ids))
        pairs = mf.train.AdagradOptimizer(0.1).compute_gradients(loss)
    assumed = mode_choice.model_shape(pairs, 1)
    assert assumed.ids_per_step == mode_choice.ASSUMED_IDS
    assert mode_choice.model_shape(pairs, 1, ids_per_step=8192).ids_per_step == 8192
    choice = mode_choice.choose(mode_choice.model_shape(pairs, 1, 8192), 2, 1, LINK, PLENTY)
    assert "8192 ids a step looked up in the tables" in choice.reason


def test_a_partitioned_table_of_unknown_batch_is_assumed_its_ids_once_not_per_part():
    with mf.Graph().as_default():
        ids = mf.placeholder(mf.int64, [None])
        table = mf.get_variable("emb", [100, 8],
                                partitioner=mf.fixed_size_partitioner(4))
        loss = mf.reduce_sum(mf.nn.embedding_lookup(table, ids))
        pairs = mf.train.AdagradOptimizer(0.1).compute_gradients(loss)
    assert sum(1 for grad, _ in pairs if grad is not None) == 4
    assert mode_choice.model_shape(pairs, 1).ids_per_step == mode_choice.ASSUMED_IDS


def test_a_rate_never_measured_is_said_so_instead_of_an_infinite_one():
    link = mode_choice.Link.from_array(LINK.as_array())
    link.ps_s_per_byte, link.row_update_s_per_element = 0.0, 0.0
    text = link.describe()
    assert "GB/s" in text and "(not measured)" in text
    assert "1000000000" not in text


def test_rows_are_priced_at_the_sparse_update_rate_and_allreduce_applies_every_workers():
    """A sparse update costs more per element than a dense one; allreduce mode has every
    worker apply all workers' rows, ps and hybrid mode the ps each worker's once."""
    shape = ModelShape(dense_bytes=1 * MiB, table_bytes=256 * MiB, row_bytes=256,
                       ids_per_step=4096, slots=0)
    slow_rows = mode_choice.Link(10e-6, 0.5e-9, 10e-6, 1e-9, update_s_per_element=1e-9,
                                 row_update_s_per_element=10e-9)
    rows = 4096 * 256 // 4
    allreduce = mode_choice.predict_seconds("allreduce", shape, 4, 0, slow_rows, PLENTY)
    flat = mode_choice.predict_seconds("allreduce", shape, 4, 0, LINK, PLENTY)
    assert allreduce.seconds - flat.seconds == pytest.approx(4 * rows * 9e-9)
    hybrid = mode_choice.predict_seconds("hybrid", shape, 4, 1, slow_rows, PLENTY)
    assert hybrid.seconds - mode_choice.predict_seconds(
        "hybrid", shape, 4, 1, LINK, PLENTY).seconds == pytest.approx(4 * rows * 9e-9)


def test_with_a_table_the_probe_times_the_sparse_update_of_its_rows():
    shape = ModelShape(1 * MiB, 64 * MiB, row_bytes=128, ids_per_step=512, slots=1)
    link = mode_choice.measure(None, 1 * MiB, shape=shape)
    assert link.row_update_s_per_element > 0
    untimed = mode_choice.measure(None, 1 * MiB)       # no table: a dense update's rate
    assert untimed.row_update_s_per_element == untimed.update_s_per_element
    assert mode_choice.Link.from_array(link.as_array()).row_update_s_per_element == \
        link.row_update_s_per_element                    # broadcast to the other workers


def test_a_ps_step_waits_for_two_round_trips_taken_while_the_workers_compute():
    """A pull and a push each wait for the ps; where it shares the cores, it must first
    get one back from the workers' compute, which the busy round trip measures."""
    shape = ModelShape(64, 0, 0, 0, 0)
    busy = mode_choice.Link(10e-6, 0.5e-9, 10e-6, 1e-9, 1e-9, ps_busy_round_trip_s=1e-3)
    for node in (None, (3, 2)):
        quiet = mode_choice.predict_seconds("ps", shape, 2, 1, LINK, PLENTY, node)
        loaded = mode_choice.predict_seconds("ps", shape, 2, 1, busy, PLENTY, node)
        assert loaded.seconds - quiet.seconds == pytest.approx(2 * (1e-3 - 10e-6))
        assert "round trips to the ps 2.00 ms" in loaded.why
    assert mode_choice.predict_seconds("allreduce", shape, 2, 1, busy, PLENTY).seconds == \
        mode_choice.predict_seconds("allreduce", shape, 2, 1, LINK, PLENTY).seconds


def test_where_one_ps_serving_every_worker_bounds_the_step_the_reason_says_how_many_would_not():
    # 8 workers pull and push 4 MiB each through one ps: the ps's serving (8 x 9 MiB of
    # traffic and updates) is the step; with one ps a worker it is no more than a worker's
    # own 8 MiB. The ps tasks are fixed at launch, so auto can only say so.
    shape = ModelShape(4 * MiB, 0, 0, 0, slots=0)
    choice = mode_choice.choose(shape, 8, 1, LINK, PLENTY, candidates=("ps",))
    assert choice.mode == "ps" and choice.ps_advice == 8
    one, eight = (mode_choice.predict_seconds("ps", shape, 8, ps, LINK, PLENTY).seconds
                  for ps in (1, 8))
    assert eight < one / 4
    assert (f"with 8 ps task(s) instead of the launch's 1, ps would add "
            f"{eight * 1e3:.2f} ms a step") in choice.reason
    assert "launch with --ps 8 (MPIFLOW_PS=8)" in choice.reason


def test_a_tiny_model_needs_one_ps_and_the_reason_says_so_where_the_launch_made_more():
    # Every ps adds a round trip each way and has next to nothing to serve.
    tiny = ModelShape(64, 0, 0, 0, slots=0)
    four = mode_choice.choose(tiny, 2, 4, LINK, PLENTY, candidates=("ps",))
    assert four.ps_advice == 1
    assert "with 1 ps task(s) instead of the launch's 4" in four.reason
    one = mode_choice.choose(tiny, 2, 1, LINK, PLENTY, candidates=("ps",))
    assert one.ps_advice is None and "--ps" not in one.reason


def test_no_ps_count_is_suggested_on_a_crowded_node_or_for_allreduce():
    shape = ModelShape(4 * MiB, 0, 0, 0, slots=0)
    # 9 ranks on 2 cores: more ps ranks would share the same cores
    crowded = mode_choice.choose(shape, 8, 1, LINK, PLENTY, candidates=("ps",), node=(9, 2))
    assert crowded.ps_advice is None and "--ps 8" not in crowded.reason
    dense = mode_choice.choose(ModelShape(40 * MiB, 0, 0, 0, slots=2), 8, 1, LINK, PLENTY)
    assert dense.mode == "allreduce" and dense.ps_advice is None
    assert "ps task(s) instead of" not in dense.reason


def test_another_ps_count_must_save_a_tenth_of_the_step_to_be_suggested():
    shape = ModelShape(4 * MiB, 0, 0, 0, slots=0)
    best = mode_choice.predict_seconds("ps", shape, 8, 8, LINK, PLENTY).seconds
    gain = mode_choice.PS_ADVICE_GAIN

    def advice(launch_seconds):
        launched = mode_choice.Prediction("ps", launch_seconds, "", True)
        return mode_choice.better_ps_count(launched, shape, 8, 1, LINK, PLENTY)

    assert advice(best / (1 - gain) * 0.99) is None
    assert advice(best / (1 - gain) * 1.01) == (8, best)
