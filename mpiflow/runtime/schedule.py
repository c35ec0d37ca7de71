"""Which ops one step runs, and in which order: pruning to what the fetches need, the
feeds' check, and a Kahn order over data, control and read-before-write edges.

The order breaks ties by creation order (and starts communication first), so every rank
that builds the same graph runs the same order: collectives are issued alike everywhere,
and a partition shipped to another rank follows one global topological order. Ops that
change state (variable writes, accumulators, sync tokens) run only when nothing else is
ready: everything of the step they do not depend on, above all the values other ranks
send, comes first, so a step dropped halfway (its client was lost) has changed nothing
that a later op of the same step was still waiting for.
"""

from __future__ import annotations

import heapq

from mpiflow import errors
from mpiflow.framework.traversal import reachable
from mpiflow.ops.registry import get_op_def


def schedule(graph, fetch_tensors, target_ops, fed):
    """Return the ops the fetches and targets need, in the order they will run.

    Raises:
        InvalidArgumentError: a needed placeholder is not fed, or the graph has a cycle.
    """
    needed = _prune(fetch_tensors, target_ops, fed)
    _check_placeholders(needed, fed)
    run_var_ops = variables_to_run(needed, fed, fetch_tensors)
    return _schedule(needed, fed, run_var_ops, fetch_tensors)


def _prune(fetch_tensors, target_ops, fed):
    """Return the set of ops the fetches and targets need, stopping at fed tensors."""
    start = [t.op for t in fetch_tensors if t not in fed] + list(target_ops)
    return reachable(start, lambda op: [t.op for t in op.inputs if t not in fed] +
                     op._control_inputs)


def _check_placeholders(needed, fed):
    missing = sorted((op for op in needed if op.type == "Placeholder"), key=lambda o: o._id)
    if missing:
        op = missing[0]
        t = op.outputs[0]
        others = ", ".join(f"'{o.name}'" for o in missing[1:4])
        more = f" (also unfed: {others})" if others else ""
        raise errors.InvalidArgumentError(
            f"You must feed a value for placeholder tensor '{op.name}' with dtype "
            f"{t.dtype.name} and shape {t.shape}{more}", op)


def variables_to_run(needed, fed, fetch_tensors, late=None):
    """VariableV2 ops whose value (not just their ref) something in the plan reads before
    any write of it (``late``: the reads after one, ``reads_after_writes``)."""
    run = set()
    late = late or {}
    fetched_ops = {t.op for t in fetch_tensors if t not in fed}
    for op in needed:
        if op.type != "VariableV2":
            continue
        if op in fetched_ops:
            run.add(op)
            continue
        for consumer in op.outputs[0]._consumers:
            if consumer in needed and not _is_ref_use(consumer, op.outputs[0]) and \
                    op not in late.get(consumer, ()):
                run.add(op)
                break
    return run


def reads_after_writes(order, fed) -> dict:
    """{op: the VariableV2 ops whose value it reads after a write of them in the same step}.

    An op that depends (through data or control) on a write of a variable reads the
    variable as the write left it, as TF1's reads of a ref do. Its plan reads the buffer
    again right before it: the write may have replaced the buffer (an ``assign`` that
    changes the shape) or made it (an initializer: there was nothing to read before).
    ``order`` is topological, so one pass carries each op's upstream writes down.
    """
    written = {}            # op -> the variables written by it or upstream of it
    late = {}
    for op in order:
        upstream = frozenset()
        for t in op.inputs:
            if t not in fed and t.op in written:
                upstream = upstream | written[t.op]
        for c in op._control_inputs:
            if c in written:
                upstream = upstream | written[c]
        ref_inputs = get_op_def(op.type).ref_inputs
        if upstream:
            reads = {t.op for i, t in enumerate(op.inputs)
                     if t.op in upstream and i not in ref_inputs and t not in fed}
            if reads:
                late[op] = reads
        if ref_inputs:
            upstream = upstream | {op.inputs[i].op for i in ref_inputs
                                   if op.inputs[i].op.type == "VariableV2"}
        if upstream:
            written[op] = upstream
    return late


def _is_ref_use(consumer, tensor):
    refs = get_op_def(consumer.type).ref_inputs
    return any(consumer.inputs[i] is tensor for i in refs)


def _alias_readers(var_tensor, needed):
    """Ops in the plan that read memory which may be ``var_tensor``'s buffer."""
    readers = set()
    stack = [var_tensor]
    seen = set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        for consumer in t._consumers:
            if consumer not in needed or _is_ref_use(consumer, t):
                continue
            readers.add(consumer)
            op_def = get_op_def(consumer.type)
            if op_def.aliases_input and consumer.inputs and consumer.inputs[0] is t:
                stack.extend(consumer.outputs)
    return readers


def _schedule(needed, fed, run_var_ops, fetch_tensors):
    """Kahn order over data, control and read-before-write edges (ties: creation order)."""
    preds = {op: set() for op in needed}
    for op in needed:
        for t in op.inputs:
            if t not in fed and t.op in needed and \
                    (t.op.type != "VariableV2" or t.op in run_var_ops):
                preds[op].add(t.op)
        preds[op].update(c for c in op._control_inputs if c in needed)
    succs = {op: set() for op in needed}
    for op, ps in preds.items():
        for p in ps:
            succs[p].add(op)
    for writer in [op for op in needed if get_op_def(op.type).ref_inputs]:
        downstream = reachable([writer], succs.__getitem__, include_start=False)
        for i in get_op_def(writer.type).ref_inputs:
            var_tensor = writer.inputs[i]
            for reader in _alias_readers(var_tensor, needed):
                if reader is writer or reader in downstream or \
                        get_op_def(reader.type).ref_inputs:
                    continue
                preds[writer].add(reader)
                succs[reader].add(writer)
    pending = {op: len(ps) for op, ps in preds.items()}
    # Among ready ops, those that start communication go first (a gradient bucket starts
    # its allreduce while the backward pass goes on), those that change state last; then
    # creation order. Every rank applies the same rule, so their orders agree.
    def key(op):
        op_def = get_op_def(op.type)
        tier = 0 if op_def.schedule_early else \
            2 if op_def.ref_inputs or op_def.changes_shared_state else 1
        return (tier, op._id)

    heap = [(key(op), op) for op, n in pending.items() if n == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, op = heapq.heappop(heap)
        order.append(op)
        for s in succs[op]:
            pending[s] -= 1
            if pending[s] == 0:
                heapq.heappush(heap, (key(s), s))
    if len(order) != len(needed):
        stuck = sorted((op for op, n in pending.items() if n > 0), key=lambda o: o._id)
        raise errors.InvalidArgumentError(
            "The graph has a cycle (or reads and writes of a variable that cannot be "
            f"ordered) through ops {[o.name for o in stuck[:5]]}", stuck[0])
    return order


def variable_aliased(tensor):
    """Name of the variable whose buffer ``tensor`` may be (a read, a view of one, or the
    output of an in-place write), else None."""
    while True:
        if tensor.op.type == "VariableV2":
            return tensor.op.name
        op_def = get_op_def(tensor.op.type)
        if op_def.ref_inputs and op_def.aliases_state:
            tensor = tensor.op.inputs[op_def.ref_inputs[0]]
        elif op_def.aliases_input and tensor.op.inputs:
            tensor = tensor.op.inputs[0]
        else:
            return None


def fetch_is_copied(tensor, fed):
    """True when a fetched value is copied where it is produced: it may share memory with
    a variable, a constant, or (as a view) an array the caller fed, so nobody's data is
    shared; or it may be a read-only view (``OpDef.read_only_output``: a broadcast), itself
    or through views of it, and the caller gets an array it can write, as from any other
    fetch."""
    through_view = False
    while tensor not in fed:
        op_def = get_op_def(tensor.op.type)
        if op_def.aliases_state or op_def.read_only_output:
            return True
        if not (op_def.aliases_input and tensor.op.inputs):
            return False
        tensor = tensor.op.inputs[0]
        through_view = True
    return through_view
