"""AllreduceOptimizer where ranks differ or settings change: ranks whose fused gradients
are not the same variables are refused naming them (they were summed into each other's
variables), a later graph trains with its own settings, half-float compression averages
what float16 holds, joinable training takes sparse gradients, top-k skips an empty
variable."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

PROG = Path(__file__).parent / "progs" / "allreduce_optimizer_cases.py"
pytestmark = pytest.mark.mpi


def results(done):
    return [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines()
            if line.startswith("result ")]


@pytest.mark.parametrize("overlap", ["1", "0"])
def test_variables_made_in_another_order_are_refused_naming_them(run_mpi, overlap):
    done = run_mpi(2, PROG, "swap", overlap, check=False)
    assert done.returncode != 0 and not results(done), done.stdout
    assert "cross-rank check failed" in done.stderr, done.stderr
    assert "holds 0:gradient of a (4 elements), 1:gradient of b (4 elements)" in done.stderr
    assert "holds 0:gradient of b (4 elements), 1:gradient of a (4 elements)" in done.stderr


def test_a_gradient_missing_on_some_ranks_is_refused_naming_the_variables(run_mpi):
    done = run_mpi(3, PROG, "no_gradient", check=False)
    assert done.returncode != 0 and not results(done), done.stdout
    assert "0:gradient of a (4 elements), 1:gradient of c (4 elements)" in done.stderr
    assert "0:gradient of a (4 elements), 1:gradient of b (4 elements)" in done.stderr


def test_a_later_graph_trains_with_its_own_settings(run_mpi):
    for rank in results(run_mpi(2, PROG, "reuse")):
        np.testing.assert_array_equal(rank["average"], [-1.5] * 3)   # -(1 + 2) / 2
        np.testing.assert_array_equal(rank["total"], [-3.0] * 3)


@pytest.mark.parametrize("ranks, algorithm", [(2, "mpi"), (3, "mpi"), (3, "ring")])
def test_half_float_compression_averages_what_float16_holds(run_mpi, ranks, algorithm):
    # Each rank's gradient and their average are 40000; their sum is past float16's 65504.
    for rank in results(run_mpi(ranks, PROG, "fp16", algorithm)):
        np.testing.assert_array_equal(rank["values"]["w"], [-4.0] * 4)


def test_joinable_training_takes_sparse_gradients(run_mpi):
    table = np.arange(12, dtype=np.float64).reshape(6, 2)
    # Steps 1-2: ranks 0 and 1 look up rows [0, 5] and [1, 5], averaged over 2; step 3:
    # rank 1 alone (rank 0 joined), rows [1, 5].
    table[0] -= 2 * 0.5
    table[1] -= 2 * 0.5 + 1
    table[5] -= 2 * 1.0 + 1
    got = results(run_mpi(2, PROG, "joinable_sparse"))
    assert len(got) == 2
    for rank in got:
        np.testing.assert_allclose(rank["table"], table)


def test_top_k_compression_leaves_an_empty_variable_alone(run_mpi):
    got = results(run_mpi(2, PROG, "topk_empty"))
    assert len(got) == 2 and got[0] == got[1]
    assert got[0]["values"]["empty"] == []


def test_a_variable_missing_on_a_rank_is_named_by_the_initial_broadcast(run_mpi):
    done = run_mpi(2, PROG, "missing", check=False)
    assert done.returncode != 0
    # Variables are broadcast in name order: rank 0 is at 'c' where rank 1 is already past.
    assert re.search(r"broadcast 'broadcast/c(_\d+)?' \(\w+, float32\[2\]\) on rank 0 of 2",
                     done.stderr), done.stderr
    assert re.search(r"broadcast 'broadcast/global_step(_\d+)?' \(\w+, int64\[\]\) on rank 1 "
                     "of 2", done.stderr), done.stderr
    # Each rank's own name, not a hash of it, for every rank.
    assert re.search(r"ranks disagree on the tensor name: 'broadcast/c(_\d+)?' on rank 0; "
                     r"'broadcast/global_step(_\d+)?' on rank 1", done.stderr), done.stderr


def test_an_uninitialized_local_variable_is_not_blamed_on_the_chief(run_mpi):
    done = run_mpi(2, PROG, "local_uninitialized", check=False)
    assert done.returncode != 0
    assert "w_residual" in done.stderr and "It lives on this task (/job:worker/task:1), " \
        "not on a ps" in done.stderr and "mf.local_variables_initializer()" in done.stderr, \
        done.stderr
