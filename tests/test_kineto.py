"""The Kineto parser on real recorded traces (../shared) and on broken files."""

from __future__ import annotations

import gzip
import json

import pytest

from advisor.trace.parse import TraceFormatError, parse_trace
from conftest import shared_trace


def test_a100_event_sync_trace():
    trace = parse_trace(str(shared_trace("critical_path/cuda_event_sync/event_sync_trace.json.gz")))
    names = [r.name for r in trace.runtime]
    assert names.count("cudaStreamSynchronize") == 1
    assert names.count("cudaDeviceSynchronize") == 1
    assert names.count("cudaEventSynchronize") == 1
    assert len(trace.kernels) == 4
    assert [m.name for m in trace.memcpy] == ["Memcpy DtoH (Device -> Pageable)"]
    assert sum(op.name == "aten::item" for op in trace.ops) == 1
    item = next(op for op in trace.ops if op.name == "aten::_local_scalar_dense")
    # `if tensor:` in that script: is_nonzero -> item -> _local_scalar_dense
    assert trace.ops[item.parent].name == "aten::item" and trace.outermost(item).name == "aten::is_nonzero"
    assert trace.device_properties and trace.device_properties[0]["name"].startswith("NVIDIA A100")


def test_triton_trace_with_float_timestamps_and_driver_launch():
    trace = parse_trace(str(shared_trace("triton_example/triton_example.json.gz")))
    [kernel] = trace.kernels
    assert kernel.name == "triton_poi_fused_add_cos_sin_0" and kernel.dur == pytest.approx(1.76, abs=0.01)
    launch = next(r for r in trace.runtime if r.name == "cuLaunchKernel")
    assert launch.cat == "cuda_driver" and launch.correlation == kernel.correlation


def test_amd_trace_parses_without_cuda_runtime_names():
    trace = parse_trace(str(shared_trace("amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz")))
    assert len(trace.kernels) == 14
    assert not any(r.name.startswith("cuda") for r in trace.runtime)
    assert sum(r.name == "hipDeviceSynchronize" for r in trace.runtime) == 1


def test_profiler_steps_assign_ops_kernels_by_correlation():
    trace = parse_trace(str(shared_trace("ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")))
    assert len(trace.steps) >= 1
    stepped = [k for k in trace.kernels if k.step is not None]
    assert stepped and all(0 <= k.step < len(trace.steps) for k in stepped)


def _write(path, payload: bytes, compress: bool = True):
    path.write_bytes(gzip.compress(payload) if compress else payload)
    return str(path)


def test_truncated_gzip_names_the_file(tmp_path):
    whole = gzip.compress(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}] * 200}).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(TraceFormatError, match=r"cut\.json\.gz: .*(truncated|corrupt)"):
        parse_trace(str(path))


def test_invalid_json_names_file_line_and_column(tmp_path):
    path = _write(tmp_path / "bad.json", b'{"traceEvents": [ {"ph": "X",, } ]}', compress=False)
    with pytest.raises(TraceFormatError, match=r"bad\.json: not valid JSON at line 1, column"):
        parse_trace(path)


def test_json_that_is_not_a_trace_is_rejected(tmp_path):
    path = _write(tmp_path / "other.json", b'{"hello": 1}', compress=False)
    with pytest.raises(TraceFormatError, match="no 'traceEvents' list"):
        parse_trace(path)


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        parse_trace(str(tmp_path / "absent.json.gz"))


def test_nested_self_time_and_source_annotations(tmp_path):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "ts": 0, "dur": 100, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "advisor.src:Tensor.item@/m.py:7", "ts": 10, "dur": 30, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::item", "ts": 11, "dur": 20, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::_local_scalar_dense", "ts": 12, "dur": 15, "tid": 1},
        {"ph": "X", "cat": "python_function", "name": "/m.py(3): forward", "ts": 50, "dur": 40, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 60, "dur": 5, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "ts": 200, "dur": 5, "tid": 1},
    ]
    trace = parse_trace(_write(tmp_path / "t.json", json.dumps({"traceEvents": events}).encode(), compress=False))
    item, scalar, add, mul = trace.ops
    assert item.self_dur == pytest.approx(5) and scalar.depth == 1 and scalar.parent == 0
    assert item.src.line == 7 and item.src.api == "Tensor.item" and item.src.exact
    assert trace.calls[0].ops == [0, 1] and trace.calls[0].step == 0
    assert add.src.file == "/m.py" and add.src.line == 3 and not add.src.exact  # function-level only
    assert mul.step is None and trace.step_ops() == [item, scalar, add]


def _kineto_text(events: list[dict]) -> str:
    """Events laid out as torch.profiler writes them (one member per line), names unescaped as it does."""
    lines = ['{', '  "schemaVersion": 1,', '  "traceEvents": [']
    for i, event in enumerate(events):
        members = [f'    "{k}": "{v}"' if isinstance(v, str) else f'    "{k}": {json.dumps(v)}' for k, v in event.items()]
        lines += ["  {", ",\n".join(members), "  }" + ("," if i < len(events) - 1 else "")]
    lines += ["  ]", "}"]
    return "\n".join(lines)


@pytest.mark.parametrize("compress", [False, True])
def test_names_with_bare_quotes_as_the_profiler_writes_them_are_repaired(tmp_path, compress):
    hostile = ['nn.Module: Block "v2"_0', 'stage "encode" / part 1', 'say ""', '"']
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "ts": 0, "dur": 9000, "tid": 1}]
    events += [{"ph": "X", "cat": "cpu_op", "name": hostile[i % 4] if i % 5 == 0 else "aten::mm",
                "ts": i, "dur": 0.5, "tid": 1, "args": {"External id": i}} for i in range(1, 4000)]
    text = _kineto_text(events)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # what the profiler wrote is not JSON
    path = _write(tmp_path / ("t.json.gz" if compress else "t.json"), text.encode(), compress=compress)
    trace = parse_trace(path)
    names = [op.name for op in trace.ops]
    written = [e["name"] for e in events[1:]]
    assert names == written and trace.repaired_lines == sum(1 for n in written if '"' in n) == 799


def test_a_line_that_is_not_a_quoted_name_is_still_an_error(tmp_path):
    path = _write(tmp_path / "bad.json", b'{"traceEvents": [\n{"ph": "X", "name": "a"b", "ts": 1}\n]}', compress=False)
    with pytest.raises(TraceFormatError, match="not valid JSON at line 2"):
        parse_trace(path)


def test_analyze_reads_a_trace_with_quoted_names_and_reports_no_error(tmp_path):
    from advisor.commands.analyze import AnalyzeOptions, run_analyze

    events = [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "ts": s * 1000, "dur": 900, "tid": 1}
              for s in range(2)]
    events += [{"ph": "X", "cat": "cpu_op", "name": 'nn.Module: Block "v2"_0' if i % 2 else "aten::mm",
                "ts": i * 10, "dur": 5, "tid": 1} for i in range(1, 190)]
    path = tmp_path / "quoted.json"
    path.write_text(_kineto_text(events))
    result = run_analyze(AnalyzeOptions(paths=(str(path),), out_dir=str(tmp_path / "out")))
    assert result.report.errors == [] and result.report.trace.note.startswith("95 event name(s)")  # 1, 3, ... 189


@pytest.mark.parametrize("compress", [False, True])
def test_an_error_far_into_a_large_trace_names_its_line_after_repairs(tmp_path, compress):
    """Text already decoded is dropped from memory; the error's line still counts every line before it."""
    events = [{"ph": "X", "cat": "cpu_op", "name": 'say "hi"' if i % 300 == 0 else "aten::mm", "ts": i, "dur": 0.5,
               "tid": 1, "args": {"External id": i, "note": "x" * 1000}} for i in range(4000)]
    text = _kineto_text(events)  # about 4 MB: several of the reader's 1 MB chunks
    broken_line = text.count("\n", 0, text.index('"ts": 3900,')) + 1
    text = text.replace('"ts": 3900,', '"ts": 3900 oops,', 1)
    path = _write(tmp_path / ("t.json.gz" if compress else "t.json"), text.encode(), compress=compress)
    with pytest.raises(TraceFormatError, match=f"not valid JSON at line {broken_line}, column 16 "):
        parse_trace(path)


def test_a_copy_the_backward_makes_is_placed_at_the_forward_line_it_differentiates(tmp_path):
    """Autograd's sequence numbers pair a backward node with its forward op; the backward thread of a GPU
    run (here: a lower thread id, read first) does not need to come after the forward's."""
    def op(name, ts, dur, tid, **args):
        return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": tid, "pid": 1, "args": args}

    def annotation(name, ts, dur, tid):
        return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur, "tid": tid, "pid": 1}
    events = [
        annotation("ProfilerStep#0", 0, 100, 9), annotation("advisor.annotated", 0, 0, 9),
        annotation("advisor.src:Tensor.transpose@/u/model.py:7", 10, 5, 9),
        op("aten::transpose", 11, 2, 9, **{"Input Dims": [[2, 3]], "Sequence number": 4, "Fwd thread id": 0}),
        annotation("advisor.src:Tensor.backward@/u/train.py:20", 30, 60, 9),
        op("autograd::engine::evaluate_function: TransposeBackward0", 40, 20, 2),
        op("TransposeBackward0", 41, 18, 2, **{"Input Dims": [[3, 2]], "Sequence number": 4, "Fwd thread id": 1}),
        op("aten::copy_", 42, 5, 2, **{"Input Dims": [[3, 2], [3, 2]], "Input Strides": [[2, 1], [1, 3]]}),
        op("aten::mul", 70, 3, 9, **{"Input Dims": [[3, 2], []]}),
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    trace = parse_trace(str(path))
    copy = next(o for o in trace.ops if o.name == "aten::copy_")
    assert copy.grad_of is not None and (copy.grad_of.file, copy.grad_of.line) == ("/u/model.py", 7)
    forward_only = next(o for o in trace.ops if o.name == "aten::mul")
    assert forward_only.grad_of is None and forward_only.src.line == 20  # the backward call's own op


def test_an_op_keeps_input_slots_only_where_the_trace_recorded_shapes(tmp_path):
    # HTA's traces and most recorded elsewhere have no shapes: their ops carry none of the six slots (48 bytes an op)
    from advisor.trace.model import Op, ShapedOp

    plain = parse_trace(str(shared_trace("critical_path/cuda_event_sync/event_sync_trace.json.gz")))
    assert plain.ops and {type(op) for op in plain.ops} == {Op}
    assert all(op.input_dims == () and op.sequence is None and not op.backward_node for op in plain.ops)
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 5, "tid": 1, "pid": 1,
               "args": {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"], "Sequence number": 7}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::empty", "ts": 10, "dur": 1, "tid": 1, "pid": 1}]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    shaped, bare = parse_trace(str(path)).ops
    assert type(shaped) is ShapedOp and shaped.input_dims == [[2, 3], [3, 4]] and shaped.sequence == 7
    assert type(bare) is Op and bare.input_dims == () and bare.input_types == ()
