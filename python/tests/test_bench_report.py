"""The benchmark driver's report (bench/gpucore_bench.py): repeats folded into medians with their
spread, the verdict against PyTorch (what it counts, ahead/behind, geometric mean, noise), the
ratio's direction in each table header, the build type and load lines, and log-scale charts."""
import importlib.util
import json
import math
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER = os.path.join(HERE, "..", "..", "bench", "gpucore_bench.py")


@pytest.fixture(scope="module")
def gb():
    spec = importlib.util.spec_from_file_location("gpucore_bench_driver", DRIVER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def conv_repeat(ours_ms, torch_ms):
    """One repeat's joined rows of a conv case: a time and its rate, against torch."""
    rows = []
    for op, o, t in zip(("fwd", "bwd_data"), ours_ms, torch_ms):
        rows.append({"bench": "conv", "case": "c1", "device": "cpu", "metric": f"{op}_ms", "value": o, "unit": "ms",
                     "peer": "torch", "peer_value": t, "speedup": t / o, "peer_version": "9.8.7"})
        rows.append({"bench": "conv", "case": "c1", "device": "cpu", "metric": f"{op}_TFLOP/s", "value": 1 / o,
                     "unit": "TFLOP/s", "peer": "torch", "peer_value": 1 / t, "speedup": t / o, "peer_version": "9.8.7"})
    return rows


def test_aggregate_takes_medians_and_ranges(gb):
    rows = gb.aggregate([conv_repeat([10, 20], [20, 10]), conv_repeat([12, 21], [20, 11]), conv_repeat([30, 19], [21, 9])])
    fwd = next(r for r in rows if r["metric"] == "fwd_ms")
    assert (fwd["value"], fwd["value_min"], fwd["value_max"], fwd["repeats"]) == (12, 10, 30, 3)
    assert fwd["peer_value"] == 20
    assert fwd["speedup"] == pytest.approx(20 / 12)
    assert (fwd["speedup_min"], fwd["speedup_max"]) == (pytest.approx(21 / 30), pytest.approx(2.0))
    assert gb.spread(fwd) == pytest.approx((30 - 10) / 12)
    assert len(rows) == 4


def test_ratio_direction(gb):
    assert gb.ratio(10.0, 20.0, "ms") == 2.0       # half the time: twice as fast
    assert gb.ratio(20.0, 10.0, "GB/s") == 2.0     # twice the rate
    assert gb.ratio(100.0, 200.0, "bytes") == 2.0  # half the memory


def test_verdict_counts_times_once_and_noise(gb):
    rows = gb.aggregate([conv_repeat([10, 20], [20, 10]), conv_repeat([10, 21], [20, 11]), conv_repeat([10, 19], [20, 9])])
    rows.append({"bench": "checkpoint", "case": "m/keep_all", "metric": "step_ms", "unit": "ms", "value": 5,
                 "peer": "keep_all", "peer_value": 5, "speedup": 1.0})
    torch_rows = [r for r in rows if gb.is_torch_row(r)]
    counted = gb.counted(torch_rows)
    assert sorted(r["metric"] for r in counted) == ["bwd_data_ms", "fwd_ms"]  # the rates are the same runs
    ahead, behind, level, gm, noisy, n = gb.tally(torch_rows)
    assert (ahead, behind, level, n) == (1, 1, 0, 2)
    assert gm == pytest.approx(math.sqrt(2.0 * (10 / 20)))
    assert noisy == 0
    assert gb.tally([r for r in rows if r.get("peer") == "keep_all"]) is None  # a policy against itself is not a case
    text = gb.verdict_text("PyTorch 9.8.7 on X", gb.tally(torch_rows))
    assert text.startswith("against PyTorch 9.8.7 on X: 1 case ahead, 1 behind, geometric mean 1.00× (ours/peer, >1 = we are faster)")
    noisy_rows = gb.aggregate([conv_repeat([10, 20], [20, 10]), conv_repeat([30, 20], [20, 10])])
    assert gb.tally([r for r in noisy_rows if gb.is_torch_row(r)])[4] == 1  # fwd: 2.0 and 0.67 span 1


def test_report_opens_with_the_verdict(gb, tmp_path):
    rows = gb.aggregate([conv_repeat([10, 10], [20, 30]), conv_repeat([11, 10], [20, 30]), conv_repeat([10, 12], [22, 30])])
    rows.append({"bench": "alloc", "case": "pair", "device": "cpu", "metric": "p50", "value": 100.0, "unit": "ns",
                 "peer": "malloc/free", "peer_value": 50.0, "speedup": 0.5, "repeats": 1})
    facts = {"date": "d", "commit": "c", "info": {}, "machine": {"cpu_model": "Test CPU 3000", "cpu_count": 2},
             "build": {"dir": "/b", "buildtype": "debugoptimized", "optimization": "2", "debug": True, "b_ndebug": "if-release"}}
    torch_facts = {"chosen": {"python": "/usr/bin/python3", "version": "9.8.7", "path": "/p/torch", "from_pythonpath": True},
                   "candidates": [{"python": "/usr/bin/python3", "version": "9.8.7"}]}
    runs = [{"name": "bench_conv", "repeats": 3, "seconds": 1.0, "load_before": [0.5, 0.4, 0.3], "load_after": [1.5, 0.5, 0.3],
             "peers": ["torch_conv.py"], "peer_rows": {"torch_conv.py": 8}}]
    for r in rows:
        if r["bench"] == "conv":
            r["_peer_source"] = "torch_conv.py"
    path = gb.write_report(str(tmp_path), rows, facts, {}, runs, torch_facts, 3, ([0.5, 0.4, 0.3], [1.5, 0.5, 0.3]))
    text = open(path).read()
    lines = text.splitlines()
    assert lines[2].startswith("**Verdict: against PyTorch 9.8.7 on Test CPU 3000 (2 cores): 2 cases ahead, 0 behind, "
                               "geometric mean 2.")
    assert "not a release build" in text and "build: debugoptimized" in text
    assert "from PYTHONPATH" in text and "torch_conv.py (peer of bench_conv): torch 9.8.7, 8 figures" in text
    assert "[0.5, 0.4, 0.3] before the run, [1.5, 0.5, 0.3] after" in text
    assert "ran 3 times" in text
    conv_head = next(l for l in lines if l.startswith("| case") and "faster" in l)
    assert "ours/peer" in conv_head and ">1 = libgpucore faster" in conv_head and "min–max (spread)" in conv_head
    assert "Against malloc/free: 0 cases ahead, 1 behind" in text
    svg = open(os.path.join(str(tmp_path), "conv.svg")).read()
    assert "log scale" in svg


def test_chart_is_log_scale(gb):
    rows = [{"case": "big", "metric": "t", "speedup": 44.0}, {"case": "small", "metric": "t", "speedup": 1.1},
            {"case": "slow", "metric": "t", "speedup": 0.9}]
    svg = gb.svg_chart("x", rows)
    widths = [float(w) for w in __import__("re").findall(r'<rect x="[^"]+" y="[^"]+" width="([^"]+)"', svg)]
    # log scale: the 44x bar is log(44)/log(1.1) ~ 40 times the 1.1x bar, not 400; 0.9x is as visible as 1.1x
    assert widths[0] / widths[1] == pytest.approx(math.log(44) / math.log(1.1), rel=0.02)
    assert widths[2] == pytest.approx(widths[1] * math.log(1 / 0.9) / math.log(1.1), rel=0.02)
    assert widths[1] > 5


def test_pick_torch_reports_candidates(gb):
    python, facts = gb.pick_torch(dict(os.environ))
    assert os.path.exists(python)
    assert facts["candidates"], "at least this Python is tried"
    chosen = facts["chosen"]
    if chosen is not None:
        assert python == chosen["python"]
        assert all(gb.version_key(c["version"]) <= gb.version_key(chosen["version"])
                   for c in facts["candidates"] if c.get("version"))
    assert gb.version_key("2.1.0+cpu") > gb.version_key("1.13.0a0")
    json.dumps(facts)


def test_pick_torch_prefers_a_newer_torch_on_pythonpath(gb, tmp_path):
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text('__version__ = "99.1.0"\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [str(tmp_path), os.environ.get("PYTHONPATH")] if p))
    python, facts = gb.pick_torch(env)
    chosen = facts["chosen"]
    assert chosen["version"] == "99.1.0" and chosen["from_pythonpath"]
    assert os.path.realpath(chosen["path"]) == os.path.realpath(str(fake))
    assert python == chosen["python"]
