"""提交的覆盖率数据（docs/data/simt_coverage.json，由 scripts/simt_coverage.py 生成）自洽：计数相加等于总数，
比例等于被拒绝数 / 总数，排名由逐个内核的记录得出，两半的划分是路径的稳定哈希。"""

from __future__ import annotations

import collections

import pytest

import reduction_lab as rl



@pytest.fixture(scope="module")
def doc():
    return rl.load_data("simt_coverage.json")


@pytest.fixture(scope="module")
def script(coverage_script):
    return coverage_script


def _check_summary(s, rows, outcomes):
    assert s["kernels"] == len(rows) > 0
    assert s["files"] == len({(r["repo"], r["file"]) for r in rows})
    counts = collections.Counter(r["outcome"] for r in rows)
    assert s["outcomes"] == {k: counts[k] for k in outcomes}
    assert sum(s["outcomes"].values()) == s["kernels"]
    assert s["ran_total"] == counts["ran"] + counts["sanitizer"]
    assert s["refused_total"] == counts["refused"] + counts["parse_error"]
    assert s["refused_share"] == round(s["refused_total"] / s["kernels"], 4)
    cons = collections.Counter(r["construct"] for r in rows if r["outcome"] in ("refused", "parse_error"))
    assert {c["construct"]: c["kernels"] for c in s["refused_constructs"]} == dict(cons)
    ranked = [c["kernels"] for c in s["refused_constructs"]]
    assert ranked == sorted(ranked, reverse=True)
    assert sum(ranked) == s["refused_total"]
    v = s["refused_verifier_specific"]
    assert 0 <= v <= s["refused_total"]
    assert s["refused_share_cuda_only"] == round((s["refused_total"] - v) / (s["kernels"] - v), 4)


def test_counts_add_up(doc, script):
    rows = doc["kernels"]
    _check_summary(doc["all"], rows, script.OUTCOMES)
    for part in ("development", "held_out"):
        _check_summary(doc[part], [r for r in rows if r["split"] == part], script.OUTCOMES)
    assert doc["development"]["kernels"] + doc["held_out"]["kernels"] == doc["all"]["kernels"]


def test_split_is_the_stable_hash_of_the_path(doc, script):
    for r in doc["kernels"]:
        assert r["split"] == script.split_of(f"{r['repo']}:{r['file']}"), r


def test_corpus_is_named_with_commits(doc):
    repos = {r["repo"] for r in doc["kernels"]}
    assert repos == {c["repo"] for c in doc["corpus"]}
    for c in doc["corpus"]:
        assert len(c["commit"]) == 40 and int(c["commit"], 16) >= 0 and "/" in c["repo"]


def test_exceptions_are_listed_with_tracebacks(doc):
    exc = [r for r in doc["kernels"] if r["outcome"] == "exception"]
    assert len(doc["exceptions"]) == len(exc)
    assert {(e["repo"], e["file"], e["kernel"]) for e in doc["exceptions"]} == {(r["repo"], r["file"], r["kernel"])
                                                                              for r in exc}
    assert all("Traceback" in e["traceback"] for e in doc["exceptions"])


def test_construct_names_are_normalised(script):
    msg = ("x/kernel.cu 第 12 行：不支持 结构体 Foo 的成员类型不同（int 与 float）：只支持…… / x/kernel.cu, line 12: "
           "unsupported: struct")
    assert script.construct_of(msg).startswith("结构体 的成员类型不同")
    assert script.construct_of("内核 k 第 3 行：不支持 函数 __requires() / kernel k, line 3: unsupported") == script.VERIFIER
    src = "__device__ int nondet();\n__global__ void k(int* p) { p[0] = nondet(); }\n"
    assert script.construct_of("内核 k 第 2 行：不支持 函数 nondet() / kernel k", "", src) == script.DECLARED_ONLY
    assert script.construct_of("内核 k 第 2 行：不支持 函数 atomicInc() / kernel k", "", src) == "函数 atomicInc()"
    assert script.construct_of("a.cu 第 3 行：无法解析 / cannot parse: before: <", "texture<float, 1> t;") == \
        "无法解析：纹理引用 texture<>"
    assert script.construct_of("找不到头文件 / include not found: cuda.h") == '#include "cuda.h"（找不到头文件）'


def test_kernel_discovery(script):
    text = """
// __global__ void commented(int* p) {}
template <int B> __global__ void t(float* x) {}
template __global__ void t<128>(float*);
template <typename T> __global__ void u(T* x) {}
extern "C" __global__ void __launch_bounds__(256) plain(int* p, int n) { }
static __global__ void plain(int* p, int n);
"""
    assert script.kernels_in(text) == [("t", True, "t<128>"), ("u", True, None), ("plain", False, None)]


def test_script_classifies_a_small_corpus(script, tmp_path):
    root = tmp_path / "corpus" / "demo"
    (root / "a").mkdir(parents=True)
    (root / "CORPUS.json").write_text('{"repo": "someone/demo", "commit": "' + "0" * 40 + '", "paths": ["a"]}')
    (root / "a" / "ok.cu").write_text("__global__ void ok(float* p, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = 1.0f; }\n")
    (root / "a" / "race.cu").write_text("__global__ void race(int* p) { p[0] = threadIdx.x; }\n")
    (root / "a" / "asm.cu").write_text('__global__ void k(int* p) {\n  asm("trap;");\n}\n')
    (root / "a" / "spec.cu").write_text("__device__ int nondet();\n__global__ void v(int* p) {\n  __requires(p != 0);\n"
                                        "  p[threadIdx.x] = nondet();\n}\n")
    (root / "a" / "tpl.cu").write_text("template <int B> __global__ void t(float* p) { p[threadIdx.x] = B; }\n")
    # GPUVerify 的注解：__requires 是空操作（内核照常运行），__assert 逐线程检查，线程间的谓词与只声明的函数是
    # CompileError（nvcc 同样拒绝）；这里不做 nvcc 的交叉检查（见 test_nvcc_faithful_coverage.py）
    (root / "a" / "req.cu").write_text('#include "cuda.h"\n__global__ void r(int* p, int n) {\n  __requires(n == 7);\n'
                                       "  p[blockIdx.x * blockDim.x + threadIdx.x] = n;\n}\n")
    (root / "a" / "asrt.cu").write_text("__global__ void a(int* p) {\n  __assert(threadIdx.x < 8);\n}\n")
    (root / "a" / "other.cu").write_text("__global__ void o(int* p) {\n  __assert(__uniform_int(p[0]));\n}\n")
    (root / "a" / "vec.cu").write_text("__global__ void w(uchar4 c, int* p) { p[blockIdx.x * blockDim.x + threadIdx.x] = c.x + c.w; }\n")
    out = tmp_path / "cov.json"
    assert script.main([str(tmp_path / "corpus"), "--json", str(out), "--no-nvcc"]) == 0
    d = __import__("json").loads(out.read_text(encoding="utf-8"))
    got = {r["kernel"]: r["outcome"] for r in d["kernels"]}
    assert got == {"ok": "ran", "race": "sanitizer", "k": "refused", "v": "compile_error", "t": "no_instance",
                   "r": "ran", "a": "sanitizer", "o": "compile_error", "w": "ran"}
    rows = {r["kernel"]: r for r in d["kernels"]}
    assert "Unresolved extern function" in rows["v"]["construct"] and "asm" in rows["k"]["construct"]
    assert rows["o"]["construct"].startswith("GPUVerify 的查询")
    assert d["all"]["refused_share"] == round(1 / 9, 4) and d["all"]["refused_verifier_specific"] == 0
    assert d["method"]["nvcc"] is None and d["all"]["nvcc_checked"] == 0 and "nvcc" not in rows["ok"]
    assert d["corpus"] == [{"repo": "someone/demo", "commit": "0" * 40, "paths": ["a"]}]
