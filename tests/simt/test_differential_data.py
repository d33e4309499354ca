"""GPU 与模拟器的对照数据（docs/data/gpu_simt_differential.json，由 scripts/simt_differential.py 在 GPU 上生成）：
覆盖登记表里模拟器能运行的每一项和每个课程内核，全部通过，且源码的 sha256 与现在的源码一致（过期的数据不算数）。"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from reduction_lab.cuda_kernels import KERNEL_DIR, kernel_names, launch
from reduction_lab.simt import constructs as C

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data" / "gpu_simt_differential.json"
COMMAND = "python3 scripts/simt_differential.py --out docs/data/gpu_simt_differential.json"


@pytest.fixture(scope="module")
def script(load_script):
    return load_script("simt_differential")


@pytest.fixture(scope="module")
def doc():
    if not DATA.is_file():
        pytest.fail(f"缺少 GPU 对照数据 {DATA.relative_to(ROOT)}：在有 GPU 的机器上运行 `{COMMAND}` 并提交结果 "
                    f"(missing GPU differential data: run the command on a GPU and commit the JSON)")
    return json.loads(DATA.read_text(encoding="utf-8"))


def test_data_comes_from_a_gpu(doc):
    assert doc["device"] and doc["sim_only"] is False, f"数据不是在 GPU 上生成的；运行 `{COMMAND}`"


def test_every_supported_registry_entry_passed_on_current_sources(doc):
    rows = {r["kernel"]: r for r in doc["kernels"] if r["kind"] == "construct"}
    stale = []
    for c in C.REGISTRY:
        if c.status_expected != "run" or C.check(c).status != "ran":
            continue
        r = rows.get(c.name)
        if r is None or r["sha256"] != C.source_sha256(c) or r.get("sim_status") != "ran":
            stale.append(c.name)
            continue
        assert r["gpu_status"] == "ran" and r["passed"] is True, r
    assert not stale, f"这些项的对照数据缺失或已过期（源码或模拟器的支持变了）：{stale}；重新运行 `{COMMAND}`"


def test_every_course_kernel_passed_on_current_sources(doc, script):
    rows = {r["kernel"]: r for r in doc["kernels"] if r["kind"] == "course"}
    stale = []
    for name, fname, *_ in script.course_cases():
        r = rows.get(name)
        sha = hashlib.sha256((KERNEL_DIR / fname).read_bytes()).hexdigest()
        if r is None or r["sha256"] != sha:
            stale.append(name)
            continue
        assert r["passed"] is True, r
    assert not stale, f"这些课程内核的对照数据缺失或已过期：{stale}；重新运行 `{COMMAND}`"


def test_printf_text_matches_the_gpu(doc):
    """printf 的登记项在 GPU 上印出的行（排序后）与模拟器的逐字相同。"""
    rows = [r for r in doc["kernels"] if r["kernel"] == "printf"]
    assert rows and rows[0]["printf_lines"] > 0 and rows[0]["printf_match"] is True, rows


def test_float_comparisons_state_their_bound(doc):
    for r in doc["kernels"]:
        if r.get("gpu_status") == "ran":
            assert 0 <= r["max_error"] <= r["bound"] or r["passed"] is False, r


def test_course_cases_cover_every_kernel_of_the_course_files(script):
    launched = {(f, k) for _, f, k, *_ in script.course_cases()}
    for fname in script.COURSE_FILES:
        for k in kernel_names(fname):
            assert (fname, k) in launched, f"{fname} 的内核 {k} 没有对照用例"


def test_sim_half_runs_and_planted_bugs_are_reported(script, tmp_path):
    out = tmp_path / "sim.json"
    assert script.main(["--sim-only", "--out", str(out)]) == 0
    d = json.loads(out.read_text(encoding="utf-8"))
    assert d["sim_only"] is True and d["device"] is None
    rows = {r["kernel"]: r for r in d["kernels"]}
    for c in C.REGISTRY:
        if c.status_expected == "run" and C.check(c).status == "ran":
            assert rows[c.name]["sim_status"] == "ran" and rows[c.name]["sim_vs_reference"] >= 0
    assert rows["tree_no_sync"]["passed"] is True and rows["tree_bad_sync"]["passed"] is True
    planted = {"tree_no_sync", "tree_bad_sync"}
    assert all(r["sim_status"] == "ran" for r in d["kernels"] if r["kind"] == "course" and r["kernel"] not in planted)


# ---------------------------------------------------------------- 启动器：C++ 内核名、模板实例、symbols、头文件（sim 模式）

def test_launcher_takes_cxx_names_symbols_and_local_includes(tmp_path):
    (tmp_path / "half.h").write_text("__device__ float half_of(float v) { return 0.5f * v; }\n", encoding="utf-8")
    src = tmp_path / "k.cu"
    src.write_text('#include "half.h"\n__constant__ float bias;\n__device__ int hits;\n'
                   "template <int B>\n__global__ void scaled(const float* x, float* y) {\n"
                   "    int i = blockIdx.x * B + threadIdx.x;\n    y[i] = half_of(x[i]) + bias;\n"
                   "    atomicAdd(&hits, 1);\n}\n"
                   "template __global__ void scaled<32>(const float*, float*);\n"
                   "__global__ void plain(float* y) { y[threadIdx.x] = bias; }\n", encoding="utf-8")
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    hits = np.zeros(1, np.int32)
    launch(src, "scaled<32>", grid=2, block=32, args=(x, y), mode="sim", symbols={"bias": 1.0, "hits": hits})
    assert y.tolist() == (0.5 * x + 1).tolist() and hits[0] == 64
    launch(src, "plain", grid=1, block=8, args=(y,), mode="sim", symbols={"bias": 3.0})
    assert (y[:8] == 3).all()
    with pytest.raises(ValueError, match="没有名为"):
        launch(src, "missing", grid=1, block=8, args=(y,), mode="sim")


def test_the_bound_rule_is_documented_in_the_script(script):
    assert re.search(r"2 \(n - 1\) u sum\|x_i\|", script.__doc__)
