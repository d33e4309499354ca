"""实验：骨架、评分程序与诊断。

* 每个实验的参考解（tests/labs/solutions/，不随包发布）通过全部用例；
* 没改过的骨架不通过，第一条诊断指向 TODO(1) 的那一行；
* 常见错误（植入参考解）各自得到专门的诊断，并指向出错的那一行；
* 命令行 ``reduction-lab lab list/start/check`` 与 ``pytest --lab``。
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import reduction_lab as rl
from reduction_lab import labs
from reduction_lab.labs import cli as lab_cli
from reduction_lab.labs.pytest_plugin import BACKEND_CHOICES

from planted import SOLUTIONS, copy_solution, edited_solution

NAMES = list(labs.LABS)

needs_tilelang = pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("tilelang") is None, reason="reduce-sum-tilelang 需要 tilelang")


def _param(name):
    return pytest.param(name, marks=[needs_tilelang] if "tilelang" in name else [])


def test_registry_matches_files():
    assert NAMES == ["softmax-triton", "softmax-rows-triton", "online-softmax", "rms-norm-triton", "layer-norm-triton", "col-sum-triton", "reduce-sum-cuda",
                     "warp-reduce-cuda", "vector-loads-cuda", "full-sum-cuda", "grid-sum-cuda", "ordered-sum-cuda", "softmax-cuda",
                     "cluster-reduce-cuda", "bank-conflicts", "reduce-sum-tilelang", "softmax-tilelang"]
    for name, lab in labs.LABS.items():
        assert (SOLUTIONS / name).is_dir(), f"{name} 没有参考解"
        for f in lab.files:
            assert (lab.skeleton_dir() / f).is_file()
            assert (SOLUTIONS / name / f).is_file()
        assert (lab.skeleton_dir() / "README.md").is_file()
        assert (Path(__file__).resolve().parents[2] / "docs" / lab.lecture).is_file()


def test_backend_choices_match_api():
    assert set(BACKEND_CHOICES) - {"nvidia"} == set(rl.api.IMPLEMENTATIONS)


@pytest.mark.parametrize("name", [_param(n) for n in NAMES])
def test_solution_passes(name, tmp_path):
    result = labs.check(name, copy_solution(name, tmp_path), bench=False)
    assert result.passed, result.report()
    assert "结论：全部" in result.report()


@pytest.mark.parametrize("name", [_param(n) for n in NAMES])
def test_skeleton_fails_at_first_todo(name, tmp_path):
    dest = labs.start(name, tmp_path / name)
    result = labs.check(name, dest, bench=False)
    assert not result.passed
    first = result.hints[0]
    lab = labs.get(name)
    text = (dest / lab.files[0]).read_text(encoding="utf-8").splitlines()
    assert first.key == "todo" and first.file == lab.files[0]
    assert re.match(r"\s*(//|#) TODO\(1\)", text[first.line - 1]), text[first.line - 1]
    assert f"{lab.files[0]}:{first.line}" in result.report()


@pytest.mark.parametrize("name", NAMES)
def test_skeleton_todo_marks_are_numbered_in_order(name):
    """骨架里以 TODO(n) 开头的注释行只能是各步的开头：1、2、3……各一次，按顺序出现（注释里提到别的步骤时
    不要让一行以 TODO(n) 开头，否则评分程序把它当作那一步的开头，「还没动过」的判断就错了）。"""
    from reduction_lab.labs import todo

    lab = labs.get(name)
    for f in lab.files:
        nums = [int(m.group(1)) for ln in lab.skeleton_text(f).splitlines() if (m := todo._MARK.search(ln))]
        assert nums == list(range(1, len(nums) + 1)), (f, nums)



def _all_code_under_last_todo(tmp_path, code_edit=None, under: int = 5) -> Path:
    """reduce-sum-cuda 的骨架，参考解的全部代码都写在 TODO(under)（默认 TODO(5)）下面；其余 TODO 下面还是骨架原样。"""
    sol = (SOLUTIONS / "reduce-sum-cuda" / "reduce_sum.cu").read_text(encoding="utf-8").splitlines()
    start = next(i for i, ln in enumerate(sol) if "int64_t row = blockIdx.x" in ln)
    stop = next(i for i, ln in enumerate(sol) if "out[row] = sdata[0];" in ln)
    code = "\n".join(ln for ln in sol[start:stop + 1] if not ln.strip().startswith("//"))
    if code_edit:
        assert code_edit[0] in code
        code = code.replace(*code_edit, 1)
    dest = labs.start("reduce-sum-cuda", tmp_path / "elsewhere")
    f = dest / "reduce_sum.cu"
    lines = f.read_text(encoding="utf-8").splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith(f"// TODO({under})"))
    f.write_text("\n".join(lines[:at + 1] + [code] + lines[at + 1:]) + "\n", encoding="utf-8")
    return dest


def test_code_written_under_a_later_todo_is_not_called_unfinished(tmp_path):
    """学习者把每一步都写在最后一个 TODO 下面：全部用例通过时照样通过（全部通过之后的检查也做了）；
    有用例失败时，TODO(1)–(4) 只作为 todo-elsewhere 提醒列出，不说它们「还没有完成」。"""
    result = labs.check("reduce-sum-cuda", _all_code_under_last_todo(tmp_path), bench=False)
    assert result.passed, result.report()
    broken = _all_code_under_last_todo(tmp_path / "b", ("s > 0; s >>= 1", "s > 1; s >>= 1"))
    result = labs.check("reduce-sum-cuda", broken, bench=False)
    keys = result.hint_keys()
    assert not result.passed and "todo" not in keys and keys[0] == "todo-elsewhere", result.report()
    assert "tree-steps" in keys, result.report()
    first = result.hints[0]
    assert "TODO(1)" in first.cause and "TODO(4)" in first.detail and "TODO(5)" not in first.detail
    assert "还没有完成" not in first.cause
    lines = (broken / "reduce_sum.cu").read_text(encoding="utf-8").splitlines()
    assert "TODO(1)" in lines[first.line - 1]


def test_code_written_under_the_first_todo_still_gets_the_checks_after_all_cases(tmp_path):
    """全部代码写在 TODO(1) 下面（后面的步骤没动过）：全部用例通过时，TODO(2)–(5) 只是提醒，不说「还没有完成」，
    全部通过之后的检查（这里是读请求的计数）照做：线程 0 一个人读完整行的写法被报出来。"""
    result = labs.check("reduce-sum-cuda", _all_code_under_last_todo(tmp_path, under=1), bench=False)
    assert result.passed, result.report()
    serial = _all_code_under_last_todo(tmp_path / "s", ("    for (int64_t j = tid; j < cols; j += blockDim.x)",
                                                        "    if (tid == 0)\n    for (int64_t j = 0; j < cols; ++j)"),
                                       under=1)
    result = labs.check("reduce-sum-cuda", serial, bench=False)
    keys = result.hint_keys()
    assert not result.passed and keys == ["todo-elsewhere", "not-parallel"], result.report()
    first = result.hints[0]
    assert "TODO(2)" in first.cause and "全部用例却都通过了" in first.cause and "TODO(5)" in first.detail
    assert "还没有完成" not in result.report().split("结论")[0]


def test_todo_untouched_marks_steps_followed_by_edited_ones():
    from reduction_lab.labs import todo

    sk = "// TODO(1): a\n// TODO(2): b\n// TODO(3): c\n// TODO 结束\n"
    assert [(t.number, t.later_edited) for t in todo.untouched(sk, sk)] == [(1, False), (2, False), (3, False)]
    mine = sk.replace("// TODO(2): b\n", "// TODO(2): b\nx = 1;\n")
    assert [(t.number, t.later_edited) for t in todo.untouched(sk, mine)] == [(1, True), (3, False)]
    gone = sk.replace("// TODO(3): c\n", "")                # 删掉 TODO(3) 这一行也算动过
    assert [(t.number, t.later_edited) for t in todo.untouched(sk, gone)] == [(1, True), (2, True)]


# (实验, 名字, 参考解里的原文, 改成, 应得的诊断, 诊断所指的行里应有的文字)
MISTAKES = [
    ("reduce-sum-cuda", "barrier-in-branch",
     "        if (tid < s)\n            sdata[tid] += sdata[tid + s];\n        __syncthreads();",
     "        if (tid < s) {\n            sdata[tid] += sdata[tid + s];\n            __syncthreads();\n        }",
     "barrier-divergence", "__syncthreads();"),
    ("reduce-sum-cuda", "missing-barrier", "    sdata[tid] = acc;\n    __syncthreads();", "    sdata[tid] = acc;",
     "shared-race", "sdata[tid] += sdata[tid + s]"),
    ("reduce-sum-cuda", "off-by-one", "j < cols;", "j <= cols;", "out-of-bounds", "row_in[j]"),
    ("reduce-sum-cuda", "no-stride-loop", "j < cols; j += blockDim.x", "j < cols && j < blockDim.x; j += blockDim.x",
     "no-stride-loop", "acc += row_in[j]"),
    ("reduce-sum-cuda", "no-tree", "sdata[tid] += sdata[tid + s];", "sdata[tid] += 0.0f;", "no-tree", "sdata[tid] +="),
    ("reduce-sum-cuda", "tree-stops-at-2", "s > 0; s >>= 1", "s > 1; s >>= 1", "tree-steps", "s > 1"),
    ("reduce-sum-cuda", "no-write", "        out[row] = sdata[0];", "        ;", "not-written", None),
    ("reduce-sum-cuda", "one-output", "        out[row] = sdata[0];", "        out[0] = sdata[0];", "global-race",
     "out[0] = sdata[0]"),
    # 编译器在下一行才发现少了分号：诊断指向少了分号的那一行
    ("reduce-sum-cuda", "missing-semicolon", "    sdata[tid] = acc;\n", "    sdata[tid] = acc\n", "syntax-error",
     "sdata[tid] = acc"),
    ("reduce-sum-cuda", "missing-paren", "j += blockDim.x)\n", "j += blockDim.x\n", "syntax-error",
     "for (int64_t j = tid"),
    ("reduce-sum-cuda", "endless-loop", "s >>= 1", "s >>= 0", "endless-loop", "s >>= 0"),
    ("reduce-sum-cuda", "endless-stride", "j += blockDim.x", "j += 0", "endless-loop", "j += 0"),
    ("reduce-sum-cuda", "int-accumulator", "float acc = 0.0f;", "int acc = 0;", "int-acc", "int acc = 0;"),
    ("reduce-sum-cuda", "kernel-renamed", "void reduce_sum_rowwise_kernel(", "void reduce_sum_kernel(", "kernel-name",
     "__global__ void reduce_sum_kernel"),
    ("reduce-sum-cuda", "undeclared", "acc += row_in[j];", "acc += row_in[k];", "undeclared", "row_in[k]"),
    # warp-reduce-cuda：第二级只让 lane < n_warps 的线程参加，mask 里却没有被读的 lane 16
    ("warp-reduce-cuda", "mask-excludes-source",
     "    if (warp == 0) {\n        float v = lane < n_warps ? warp_sums[lane] : 0.0f;\n"
     "        for (int offset = 16; offset > 0; offset >>= 1)\n            v += __shfl_down_sync(FULL_MASK, v, offset);",
     "    if (warp == 0 && lane < n_warps) {\n        float v = warp_sums[lane];\n"
     "        for (int offset = 16; offset > 0; offset >>= 1)\n            v += __shfl_down_sync((1u << n_warps) - 1, v, offset);",
     "warp-sync", "(1u << n_warps) - 1"),
    ("warp-reduce-cuda", "half-mask", "acc += __shfl_down_sync(FULL_MASK, acc, offset);",
     "acc += __shfl_down_sync(0x0000ffffu, acc, offset);", "warp-sync", "0x0000ffffu"),
    ("warp-reduce-cuda", "missing-barrier", "        warp_sums[warp] = acc;\n    __syncthreads();",
     "        warp_sums[warp] = acc;", "shared-race", "warp_sums[lane]"),
    ("warp-reduce-cuda", "barrier-in-branch", "    if (lane == 0)\n        warp_sums[warp] = acc;\n    __syncthreads();",
     "    if (lane == 0) {\n        warp_sums[warp] = acc;\n        __syncthreads();\n    }", "barrier-divergence",
     "__syncthreads();"),
    ("warp-reduce-cuda", "block-not-multiple-of-32", "#define BLOCK_SIZE 256", "#define BLOCK_SIZE 100", "block-size",
     "#define BLOCK_SIZE 100"),
    ("warp-reduce-cuda", "lanes-beyond-n-warps", "float v = lane < n_warps ? warp_sums[lane] : 0.0f;",
     "float v = warp_sums[lane];", "uninitialized-read", "float v = warp_sums[lane];"),
    ("warp-reduce-cuda", "n-warps-hard-coded", "unsigned int n_warps = blockDim.x / 32;", "unsigned int n_warps = 8;",
     "uninitialized-read", "warp_sums[lane]"),
    ("warp-reduce-cuda", "lanes-beyond-row-end", "    float acc = 0.0f;\n    for (int64_t j = tid;",
     "    float acc = row_in[tid];\n    for (int64_t j = tid + blockDim.x;", "out-of-bounds", "float acc = row_in[tid];"),
    ("warp-reduce-cuda", "no-second-stage", "            out[row] = v;", "            out[row] = warp_sums[0];",
     "no-second-stage", "out[row] = warp_sums[0];"),
    ("warp-reduce-cuda", "shuffle-stops-at-2", "offset > 0; offset >>= 1)\n        acc", "offset > 1; offset >>= 1)\n        acc",
     "shfl-steps", "offset > 1"),
    ("warp-reduce-cuda", "no-write", "            out[row] = v;", "            ;", "not-written", None),
    ("warp-reduce-cuda", "endless-loop", "offset > 0; offset >>= 1)\n        acc", "offset > 0; offset >>= 0)\n        acc",
     "endless-loop", "offset >>= 0"),
    # vector-loads-cuda：整包读之前没有先读到 16 字节边界，模拟器在不对齐的那次加载上停下（GPU 上是 misaligned address）
    ("vector-loads-cuda", "no-head", "    int64_t head = (int64_t)((16 - (size_t)row_in % 16) % 16) / 2;\n",
     "    int64_t head = 0;\n", "misaligned", "sum_pack(pk[k])"),
    ("vector-loads-cuda", "head-in-bytes", "% 16) % 16) / 2;", "% 16) % 16);", "misaligned", "sum_pack(pk[k])"),
    ("vector-loads-cuda", "packs-from-row-start", "const pack8 *pk = (const pack8 *)(row_in + head);",
     "const pack8 *pk = (const pack8 *)row_in;", "misaligned", "sum_pack(pk[k])"),
    ("vector-loads-cuda", "no-tail",
     "    for (int64_t j = head + VEC * n_pack + tid; j < cols; j += blockDim.x)\n        acc += __bfloat162float(row_in[j]);\n",
     "", "no-tail", "sum_pack(pk[k])"),
    ("vector-loads-cuda", "no-head-loop", "    for (int64_t j = tid; j < head; j += blockDim.x)\n        acc += __bfloat162float(row_in[j]);\n",
     "", "no-head", "sum_pack(pk[k])"),
    ("vector-loads-cuda", "head-not-clamped", "    head = head < cols ? head : cols;\n", "", "head-past-end", "int64_t head ="),
    ("vector-loads-cuda", "pack-stride-1", "k < n_pack; k += blockDim.x", "k < n_pack; k += 1", "pack-stride", "k += 1"),
    ("vector-loads-cuda", "scalar-main-loop", "        acc += sum_pack(pk[k]);",
     "        for (int e = 0; e < VEC; e++)\n            acc += __bfloat162float(row_in[head + VEC * k + e]);", "scalar-loads",
     "row_in[head + VEC * k + e]"),
    ("vector-loads-cuda", "no-write", "        out[row] = sdata[0];", "        ;", "not-written", None),
    ("vector-loads-cuda", "tail-past-end", "j < cols; j += blockDim.x)\n        acc += __bfloat162float(row_in[j]);\n\n",
     "j <= cols; j += blockDim.x)\n        acc += __bfloat162float(row_in[j]);\n\n", "out-of-bounds", "row_in[j]"),
    # full-sum-cuda：不用原子操作的 *out += s 是全局内存数据竞争（GPU 上只是偶尔少加几块）
    ("full-sum-cuda", "plain-add", "            atomicAdd(out, s);", "            *out += s;", "global-race", "*out += s;"),
    ("full-sum-cuda", "plain-store", "            atomicAdd(out, s);", "            *out = s;", "global-race", "*out = s;"),
    # 内核里先清零：竞争报在 atomicAdd 那一行，诊断指向清零的那一行
    ("full-sum-cuda", "zero-in-kernel", "    int64_t stride", "    if (blockIdx.x == 0 && tid == 0)\n        *out = 0.0f;\n"
     "    int64_t stride", "global-race", "*out = 0.0f;"),
    ("full-sum-cuda", "no-grid-stride", "j < n; j += stride", "j < n && j < stride; j += stride", "no-grid-stride",
     "acc += in[j]"),
    ("full-sum-cuda", "block-stride", "int64_t stride = (int64_t)gridDim.x * blockDim.x;", "int64_t stride = blockDim.x;",
     "block-stride", "int64_t stride = blockDim.x;"),
    ("full-sum-cuda", "no-block-offset", "int64_t i = (int64_t)blockIdx.x * blockDim.x + tid;", "int64_t i = tid;",
     "no-block-offset", "int64_t i = tid;"),
    ("full-sum-cuda", "first-block-only", "        if (lane == 0)\n            atomicAdd",
     "        if (lane == 0 && blockIdx.x == 0)\n            atomicAdd", "first-block-only", "atomicAdd(out, s);"),
    ("full-sum-cuda", "first-warp-only", "float s = warp_sum(lane < n_warps ? warp_sums[lane] : 0.0f);",
     "float s = warp_sums[0];", "first-warp-only", "atomicAdd(out, s);"),
    # 每个线程都原子加：结果是对的，模拟器数出的原子操作是每块 blockDim.x 次
    ("full-sum-cuda", "atomic-per-thread", "    // 3. warp 内归约", "    atomicAdd(out, acc);\n    return;\n    // 3. warp 内归约",
     "too-many-atomics", "atomicAdd(out, acc);"),
    ("full-sum-cuda", "every-lane-adds", "        if (lane == 0)\n            atomicAdd(out, s);", "        atomicAdd(out, s);",
     "too-many-atomics", "atomicAdd(out, s);"),
    ("full-sum-cuda", "missing-barrier", "        warp_sums[warp] = acc;\n    __syncthreads();", "        warp_sums[warp] = acc;",
     "shared-race", "warp_sums[lane]"),
    ("full-sum-cuda", "barrier-in-branch", "    if (lane == 0)\n        warp_sums[warp] = acc;\n    __syncthreads();",
     "    if (lane == 0) {\n        warp_sums[warp] = acc;\n        __syncthreads();\n    }", "barrier-divergence",
     "__syncthreads();"),
    ("full-sum-cuda", "lanes-beyond-n-warps", "lane < n_warps ? warp_sums[lane] : 0.0f", "warp_sums[lane]",
     "uninitialized-read", "warp_sums[lane]"),
    ("full-sum-cuda", "off-by-one", "j < n;", "j <= n;", "out-of-bounds", "acc += in[j]"),
    ("full-sum-cuda", "int-accumulator", "float acc = 0.0f;", "int acc = 0;", "int-acc", "int acc = 0;"),
    ("full-sum-cuda", "no-write", "            atomicAdd(out, s);", "            ;", "not-written", None),
    ("full-sum-cuda", "endless-loop", "j += stride", "j += 0", "endless-loop", "j += 0"),
    ("full-sum-cuda", "block-not-multiple-of-32", "#define BLOCK_SIZE 256", "#define BLOCK_SIZE 100", "block-size",
     "#define BLOCK_SIZE 100"),
    # grid-sum-cuda：网格屏障 grid.sync()（少了它是跨线程块的全局内存竞争；写在分支里是屏障发散）
    ("grid-sum-cuda", "no-grid-sync", "    grid.sync();\n", "", "global-race", "partial[b]"),
    ("grid-sum-cuda", "sync-in-branch", "    grid.sync();\n\n    // 4. 0 号块按固定的顺序合并\n    if (blockIdx.x == 0) {\n",
     "    // 4. 0 号块按固定的顺序合并\n    if (blockIdx.x == 0) {\n        grid.sync();\n", "barrier-divergence", "grid.sync();"),
    ("grid-sum-cuda", "every-block-merges", "    if (blockIdx.x == 0) {", "    {", "global-race", "*out = t;"),
    ("grid-sum-cuda", "own-partial-only", "b < gridDim.x; b += blockDim.x",
     "b < 1; b += blockDim.x", "own-partial-only", "partial[b]"),
    ("grid-sum-cuda", "partial-bound", "b < gridDim.x; b += blockDim.x",
     "b < gridDim.x - 1; b += blockDim.x", "partial-bound", "gridDim.x - 1"),
    ("grid-sum-cuda", "partial-beyond-grid", "b < gridDim.x; b += blockDim.x",
     "b < blockDim.x; b += blockDim.x", "out-of-bounds", "partial[b]"),
    ("grid-sum-cuda", "atomic-out", "        if (tid == 0)\n            *out = t;",
     "        if (tid == 0)\n            atomicAdd(out, t);", "atomics", "atomicAdd(out, t);"),
    ("grid-sum-cuda", "two-grid-syncs", "    grid.sync();\n",
     "    grid.sync();\n    grid.sync();\n", "grid-barriers", "grid.sync();"),
    ("grid-sum-cuda", "partial-by-thread", "        partial[blockIdx.x] = s;",
     "        partial[tid] = s;", "global-race", "partial[tid] = s;"),
    ("grid-sum-cuda", "block-stride", "int64_t stride = (int64_t)gridDim.x * blockDim.x;",
     "int64_t stride = blockDim.x;", "block-stride", "int64_t stride = blockDim.x;"),
    ("grid-sum-cuda", "no-write", "            *out = t;", "            ;", "not-written", None),
    # ordered-sum-cuda：线程块之间的等待（模拟器先整网格一起执行，等不到就一块接一块、两个方向各执行一遍）
    ("ordered-sum-cuda", "block-index", "    int seg = seg_s;", "    int seg = blockIdx.x;", "order-dependent",
     "int seg = blockIdx.x;"),
    ("ordered-sum-cuda", "plain-read", "while (atomicAdd(&counters[1], 0) != seg)", "while (counters[1] != seg)",
     "plain-load", "while (counters[1] != seg)"),
    ("ordered-sum-cuda", "no-publish", "        atomicExch(&counters[1], seg + 1);\n", "", "spin-wait",
     "while (atomicAdd(&counters[1], 0) != seg)"),
    ("ordered-sum-cuda", "wrong-turn", "!= seg) { }", "!= seg + 1) { }", "spin-wait", "!= seg + 1"),
    ("ordered-sum-cuda", "no-fence", "        *out += s;\n        __threadfence();\n", "        *out += s;\n",
     "global-race", "*out += s;"),
    ("ordered-sum-cuda", "atomic-out", "        *out += s;", "        atomicAdd(out, s);", "out-writes",
     "atomicAdd(out, s);"),
    ("ordered-sum-cuda", "every-thread-adds", "    if (tid == 0) {\n        while", "    {\n        while",
     "global-race", "*out += s;"),
    ("ordered-sum-cuda", "block-stride", "int64_t stride = (int64_t)gridDim.x * blockDim.x;",
     "int64_t stride = blockDim.x;", "block-stride", "int64_t stride = blockDim.x;"),
    ("ordered-sum-cuda", "no-add", "        *out += s;", "        ;", "not-written", None),
    # cluster-reduce-cuda：簇屏障与分布式共享内存
    ("cluster-reduce-cuda", "no-first-cluster-sync", "    cluster.sync();\n    if (rank == 0 && tid == 0) {",
     "    if (rank == 0 && tid == 0) {", "cluster-race", "map_shared_rank(&partial, r)"),
    # __syncthreads() 只排定本块的线程：别的块写 partial 与 0 号块读它之间仍然没有顺序
    ("cluster-reduce-cuda", "syncthreads-for-cluster-sync", "    cluster.sync();\n    if (rank == 0 && tid == 0) {",
     "    __syncthreads();\n    if (rank == 0 && tid == 0) {", "cluster-race", "map_shared_rank(&partial, r)"),
    ("cluster-reduce-cuda", "no-final-cluster-sync", "    // 5. 0 号块读完之前谁也不退出\n    cluster.sync();\n", "",
     "dsmem-exited", "map_shared_rank(&partial, r)"),
    ("cluster-reduce-cuda", "cluster-sync-in-rank0-branch", "    cluster.sync();\n    if (rank == 0 && tid == 0) {",
     "    if (rank == 0 && tid == 0) {\n        cluster.sync();", "barrier-divergence", "cluster.sync();"),
    ("cluster-reduce-cuda", "final-sync-only-in-rank0", "    // 5. 0 号块读完之前谁也不退出\n    cluster.sync();",
     "    if (rank == 0)\n        cluster.sync();", "barrier-divergence", "cluster.sync();"),
    ("cluster-reduce-cuda", "rank-past-the-cluster", "r < CLUSTER_SIZE; ++r", "r <= CLUSTER_SIZE; ++r", "dsmem-rank",
     "map_shared_rank(&partial, r)"),
    ("cluster-reduce-cuda", "block-index-as-rank", "map_shared_rank(&partial, r)", "map_shared_rank(&partial, blockIdx.x + r)",
     "dsmem-rank", "map_shared_rank(&partial, blockIdx.x + r)"),
    ("cluster-reduce-cuda", "stride-without-cluster", "j += (int64_t)CLUSTER_SIZE * blockDim.x", "j += blockDim.x",
     "slice-overlap", "for (int64_t j"),
    ("cluster-reduce-cuda", "start-without-rank", "j = (int64_t)rank * blockDim.x + tid;", "j = tid;", "slice-overlap",
     "for (int64_t j = tid"),
    # 步长里把簇大小写死成 4：默认的 4 块通过，2 块的簇漏掉一半的列
    ("cluster-reduce-cuda", "cluster-size-hard-coded", "j += (int64_t)CLUSTER_SIZE * blockDim.x", "j += (int64_t)4 * blockDim.x",
     "slice-gap", "(int64_t)4 * blockDim.x"),
    ("cluster-reduce-cuda", "contiguous-floor",
     "    for (int64_t j = (int64_t)rank * blockDim.x + tid; j < cols; j += (int64_t)CLUSTER_SIZE * blockDim.x)\n",
     "    int64_t per = cols / CLUSTER_SIZE;\n    for (int64_t j = rank * per + tid; j < rank * per + per; j += blockDim.x)\n",
     "slice-gap", "j < rank * per + per"),
    ("cluster-reduce-cuda", "rank0-only", "for (int r = 0; r < CLUSTER_SIZE; ++r)", "for (int r = 0; r < 1; ++r)",
     "rank0-only", "map_shared_rank(&partial, r)"),
    ("cluster-reduce-cuda", "skips-own-partial", "for (int r = 0; r < CLUSTER_SIZE; ++r)", "for (int r = 1; r < CLUSTER_SIZE; ++r)",
     "missing-partials", "for (int r = 1;"),
    ("cluster-reduce-cuda", "own-partial-every-time", "total += *cluster.map_shared_rank(&partial, r);", "total += partial;",
     "no-dsmem", "total += partial;"),
    ("cluster-reduce-cuda", "row-is-block-index", "int64_t row = blockIdx.x / CLUSTER_SIZE;", "int64_t row = blockIdx.x;",
     "out-of-bounds", "acc += row_in[j]"),
    ("cluster-reduce-cuda", "cluster-too-large", "#define CLUSTER_SIZE 4", "#define CLUSTER_SIZE 16", "cluster-size",
     "#define CLUSTER_SIZE 16"),
    ("cluster-reduce-cuda", "block-not-multiple-of-32", "#define BLOCK_SIZE 256", "#define BLOCK_SIZE 100", "block-size",
     "#define BLOCK_SIZE 100"),
    ("cluster-reduce-cuda", "no-write", "        out[row] = total;", "        ;", "not-written", None),
    ("softmax-triton", "other-zero", 'other=-float("inf")', "other=0.0", "mask-other", "other=0.0"),
    # 填了 +inf（少了负号）：内核写出了 NaN，不是没写
    ("softmax-triton", "other-plus-inf", 'other=-float("inf")', 'other=float("inf")', "mask-other", 'other=float("inf")'),
    # 行距用成了 N：只有「行距大于 N 的视图」这一个用例能发现
    ("softmax-triton", "row-times-n-cols", "in_ptr + row * in_row_stride", "in_ptr + row * n_cols", "row-stride",
     "row * n_cols"),
    ("softmax-triton", "out-stride-for-in", "in_ptr + row * in_row_stride", "in_ptr + row * out_row_stride",
     "row-stride", "tl.load"),
    ("online-softmax", "no-inf-guard", 'm_ref = tl.where(m_new == -float("inf"), 0.0, m_new)', "m_ref = m_new",
     "inf-guard", "tl.exp(x - m_ref)"),
    ("rms-norm-triton", "row-times-n-cols", "in_ptr + row * in_row_stride", "in_ptr + row * n_cols", "row-stride",
     "row * n_cols"),
    ("rms-norm-triton", "sum-not-squares", "ms = tl.sum(x * x, axis=0) / n_cols", "ms = tl.sum(x, axis=0) / n_cols",
     "mean-square", "tl.sum(x, axis=0)"),
    # 32 位的行号乘行距：用例测不出，源码检查找出
    ("softmax-triton", "int32-row", "tl.program_id(0).to(tl.int64)", "tl.program_id(0)", "int32-offset",
     "row * in_row_stride"),
    ("softmax-rows-triton", "int32-pid", "tl.program_id(0).to(tl.int64)", "tl.program_id(0)", "int32-offset",
     "rows[:, None] * in_row_stride"),
    ("online-softmax", "int32-row", "tl.program_id(0).to(tl.int64)", "tl.program_id(0)", "int32-offset",
     "row * in_row_stride"),
    ("rms-norm-triton", "int32-row", "tl.program_id(0).to(tl.int64)", "tl.program_id(0)", "int32-offset",
     "row * in_row_stride"),
    ("layer-norm-triton", "int32-row", "tl.program_id(0).to(tl.int64)", "tl.program_id(0)", "int32-offset",
     "row * x_row_stride"),
    ("col-sum-triton", "int32-rows", "rows.to(tl.int64)[:, None]", "rows[:, None]", "int32-offset", "in_row_stride"),
    # 32 位的循环变量与 64 位的上界比较：n >= 2^31 时循环停不下来，用例测不出，源码检查找出
    ("full-sum-cuda", "int32-counter", "    for (int64_t j = i; j < n; j += stride)", "    for (int j = i; j < n; j += stride)",
     "int32-counter", "j < n"),
    ("softmax-cuda", "uint32-counter", "    for (int64_t j = tid; j < cols; j += blockDim.x) {",
     "    for (unsigned j = tid; j < cols; j += blockDim.x) {", "int32-counter", "j < cols"),
    ("reduce-sum-cuda", "int32-row", "    int64_t row = blockIdx.x;\n    const float *row_in = in + row * cols;",
     "    int row = blockIdx.x;\n    int c = cols;\n    const float *row_in = in + row * c;", "int32-offset", "row * c"),
    # Triton 自己的报错：换成学习者看得懂的原因与改法
    ("softmax-triton", "axis-1-on-1d", "tl.max(x, axis=0)", "tl.max(x, axis=1)", "triton-error", "tl.max(x, axis=1)"),
    ("softmax-triton", "arange-not-pow2", "cols = tl.arange(0, BLOCK_SIZE)", "cols = tl.arange(0, 1000)", "triton-error",
     "tl.arange(0, 1000)"),
    ("col-sum-triton", "store-to-scalar", "tl.store(out_ptr + cols,", "tl.store(out_ptr + pid,", "triton-error",
     "out_ptr + pid"),
    ("online-softmax", "no-m-update", "        m = m_new\n", "\n", "no-m-update", "m_new = "),
    # 线程 0 一个人读完整行：结果对，读请求多出几十倍（全部用例通过之后的检查）
    ("warp-reduce-cuda", "serial-row", "    for (int64_t j = tid; j < cols; j += blockDim.x)",
     "    if (tid == 0)\n    for (int64_t j = 0; j < cols; ++j)", "not-parallel", "acc += row_in[j]"),
    # 累加器的初值是 float16、循环里算出的是 float32：解释器照算，编译器拒绝（sim 模式在全部通过之后的编译检查里）
    ("col-sum-triton", "acc-float16", "acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)",
     "acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float16)", "gpu-compile", "dtype=tl.float16"),
    # [:, None] 写了，tl.max 却沿 axis=0：形状对不上，诊断指向 axis=0 那一行
    ("softmax-rows-triton", "max-axis-0", "m = tl.max(x, axis=1)", "m = tl.max(x, axis=0)", "wrong-axis",
     "tl.max(x, axis=0)"),
    ("softmax-cuda", "serial-read", "    float m = -INFINITY;\n    for (int64_t j = tid; j < cols; j += blockDim.x) {",
     "    float m = -INFINITY;\n    if (tid == 0)\n    for (int64_t j = 0; j < cols; ++j) {", "not-parallel", "row_in[j]"),
    # 只有第 0 组列的偏移不对：别的列没有 program 写
    ("col-sum-triton", "cols-without-block", "cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)",
     "cols = pid + tl.arange(0, BLOCK_N)", "col-offset", "cols = pid +"),
    ("softmax-triton", "unmasked-load", 'cols, mask=mask, other=-float("inf"))', "cols)", "out-of-bounds", "tl.load"),
    ("softmax-triton", "no-max", "tl.exp(x - tl.max(x, axis=0))", "tl.exp(x)", "no-max-subtraction", "tl.exp"),
    ("softmax-triton", "load-twice", "    num = tl.exp(x - tl.max(x, axis=0))",
     '    x2 = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)\n'
     "    num = tl.exp(x2 - tl.max(x, axis=0))", "memory-loads", "x2 = tl.load"),
    ("softmax-triton", "undeclared", "    y = num / tl.sum(num, axis=0)", "    y = nm / tl.sum(num, axis=0)",
     "undeclared", "y = nm /"),
    ("softmax-triton", "store-float16", "y.to(out_ptr.dtype.element_ty)", "y.to(tl.float16)", "low-precision",
     "tl.float16"),
    # 除以 x 的和而不是指数的和：每行的和不是 1，但这不是掩码的问题
    ("softmax-triton", "wrong-denominator", "tl.sum(num, axis=0)", "tl.sum(x, axis=0)", "wrong-softmax", None),
    ("softmax-triton", "syntax", "    y = num / tl.sum(num, axis=0)", "    y = num / tl.sum(num, axis=0", "syntax-error",
     None),
    ("online-softmax", "no-rescale", "d = d * tl.exp(m - m_ref) + ", "d = d + ", "no-rescale", "d = d +"),
    ("online-softmax", "three-passes",
     "        m_new = tl.maximum(m, tl.max(x, axis=0))\n        m_ref = tl.where(m_new == -float(\"inf\"), 0.0, m_new)\n"
     "        d = d * tl.exp(m - m_ref) + tl.sum(tl.exp(x - m_ref), axis=0)\n        m = m_new\n",
     "        m = tl.maximum(m, tl.max(x, axis=0))\n"
     "    for start in range(0, n_cols, BLOCK_SIZE):\n        cols = start + tl.arange(0, BLOCK_SIZE)\n"
     "        x = tl.load(in_row + cols, mask=cols < n_cols, other=-float(\"inf\")).to(tl.float32)\n"
     "        d = d + tl.sum(tl.exp(x - m), axis=0)\n", "memory-loads", "tl.load"),
    ("online-softmax", "other-zero", 'mask=cols < n_cols, other=-float("inf"))', "mask=cols < n_cols, other=0.0)",
     "mask-other", "other=0.0"),
    # softmax-rows-triton：一个 program 处理 BLOCK_M 行：mask 要管行，行号带上 pid * BLOCK_M，沿 axis=1 归约再 [:, None]
    ("softmax-rows-triton", "no-row-mask", "mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)",
     "mask = cols[None, :] < n_cols", "row-mask", "mask = cols[None, :] < n_cols"),
    ("softmax-rows-triton", "rows-without-pid", "rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)", "rows = tl.arange(0, BLOCK_M)",
     "row-offset", "rows = tl.arange(0, BLOCK_M)"),
    ("softmax-rows-triton", "rows-pid-plus", "rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)",
     "rows = pid + tl.arange(0, BLOCK_M)", "row-offset", "rows = pid + tl.arange(0, BLOCK_M)"),
    ("softmax-rows-triton", "axis0-both", "m = tl.max(x, axis=1)\n    num = tl.exp(x - m[:, None])\n    # 4. 每行的指数之和\n"
     "    d = tl.sum(num, axis=1)\n    y = num / d[:, None]",
     "m = tl.max(x, axis=0)\n    num = tl.exp(x - m[None, :])\n    # 4. 每行的指数之和\n    d = tl.sum(num, axis=0)\n"
     "    y = num / d[None, :]", "wrong-axis", "m = tl.max(x, axis=0)"),
    ("softmax-rows-triton", "max-axis0", "m = tl.max(x, axis=1)\n    num = tl.exp(x - m[:, None])",
     "m = tl.max(x, axis=0)\n    num = tl.exp(x - m[None, :])", "wrong-axis", "m = tl.max(x, axis=0)"),
    ("softmax-rows-triton", "sum-axis0", "d = tl.sum(num, axis=1)\n    y = num / d[:, None]",
     "d = tl.sum(num, axis=0)\n    y = num / d[None, :]", "wrong-axis", "d = tl.sum(num, axis=0)"),
    ("softmax-rows-triton", "no-broadcast", "num = tl.exp(x - m[:, None])", "num = tl.exp(x - m)", "broadcast",
     "num = tl.exp(x - m)"),
    ("softmax-rows-triton", "row-stride-is-n", "rows[:, None] * in_row_stride", "rows[:, None] * n_cols", "row-stride",
     "rows[:, None] * n_cols"),
    ("softmax-rows-triton", "other-zero", 'other=-float("inf")', "other=0.0", "mask-other", "other=0.0"),
    ("softmax-rows-triton", "no-max", "num = tl.exp(x - m[:, None])", "num = tl.exp(x)", "no-max-subtraction", "tl.exp(x)"),
    ("softmax-rows-triton", "store-bfloat16", "y.to(out_ptr.dtype.element_ty)", "y.to(tl.bfloat16)", "low-precision",
     "tl.bfloat16"),
    ("softmax-rows-triton", "load-twice", "    num = tl.exp(x - m[:, None])",
     '    x2 = tl.load(in_ptr + rows[:, None] * in_row_stride + cols[None, :], mask=mask, other=-float("inf")).to(tl.float32)\n'
     "    num = tl.exp(x2 - m[:, None])", "memory-loads", "x2 = tl.load"),
    ("softmax-rows-triton", "no-store",
     "    tl.store(out_ptr + rows[:, None] * out_row_stride + cols[None, :], y.to(out_ptr.dtype.element_ty), mask=mask)",
     "    pass", "not-written", None),
    # rms-norm-triton：softmax 的 -inf 习惯在平方和里是错的；均值除以 N 而不是 BLOCK_SIZE
    ("rms-norm-triton", "other-neg-inf", "cols, mask=mask, other=0.0).to(tl.float32)\n    w",
     'cols, mask=mask, other=-float("inf")).to(tl.float32)\n    w', "mask-other", 'other=-float("inf")'),
    ("rms-norm-triton", "mean-over-block", "axis=0) / n_cols", "axis=0) / BLOCK_SIZE", "mean-over-block", "/ BLOCK_SIZE"),
    ("rms-norm-triton", "no-mean", "ms = tl.sum(x * x, axis=0) / n_cols", "ms = tl.sum(x * x, axis=0)", "no-mean",
     "tl.sum(x * x"),
    ("rms-norm-triton", "no-eps", "tl.rsqrt(ms + eps)", "tl.rsqrt(ms)", "no-eps", "tl.rsqrt(ms)"),
    ("rms-norm-triton", "sqrt", "tl.rsqrt(ms + eps)", "tl.sqrt(ms + eps)", "sqrt-not-rsqrt", "tl.sqrt(ms + eps)"),
    ("rms-norm-triton", "no-weight", "y = x * tl.rsqrt(ms + eps) * w", "y = x * tl.rsqrt(ms + eps)", "no-weight",
     "y = x * tl.rsqrt"),
    ("rms-norm-triton", "unmasked-load", "cols, mask=mask, other=0.0).to(tl.float32)\n    w", "cols).to(tl.float32)\n    w",
     "out-of-bounds", "tl.load"),
    ("rms-norm-triton", "load-twice", "    y = x * tl.rsqrt(ms + eps) * w",
     "    x2 = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=0.0).to(tl.float32)\n"
     "    y = x2 * tl.rsqrt(ms + eps) * w", "memory-loads", "x2 = tl.load"),
    ("rms-norm-triton", "store-float16", "y.to(out_ptr.dtype.element_ty)", "y.to(tl.float16)", "low-precision",
     "tl.float16"),
    ("rms-norm-triton", "no-store", "    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)",
     "    pass", "not-written", None),
    # layer-norm-triton：长行按块合并 (n, mean, m2)；最后一块不满、被屏蔽的车道在减去均值之后不是 0
    ("layer-norm-triton", "count-masked", "n_b = tl.minimum(n_cols - start, BLOCK_SIZE).to(tl.float32)",
     "n_b = BLOCK_SIZE * 1.0", "count-masked", "n_b = BLOCK_SIZE"),
    ("layer-norm-triton", "no-where", "d = tl.where(mask, x - mean_b, 0.0)", "d = x - mean_b", "mask-m2", "d = x - mean_b"),
    ("layer-norm-triton", "no-cross-term", "m2 += m2_b + delta * delta * n * n_b / n_ab", "m2 += m2_b", "no-cross-term",
     "m2 += m2_b"),
    ("layer-norm-triton", "unbiased", "tl.sqrt(m2 / n + eps)", "tl.sqrt(m2 / (n - 1) + eps)", "unbiased", "n - 1"),
    ("layer-norm-triton", "eps-outside", "1.0 / tl.sqrt(m2 / n + eps)", "1.0 / (tl.sqrt(m2 / n) + eps)", "eps-outside",
     "tl.sqrt(m2 / n) + eps"),
    ("layer-norm-triton", "no-eps", "tl.sqrt(m2 / n + eps)", "tl.sqrt(m2 / n)", "no-eps", "tl.sqrt(m2 / n)"),
    ("layer-norm-triton", "no-weight", "y = (x - mean) * rstd * w + b", "y = (x - mean) * rstd + b", "no-weight",
     "rstd + b"),
    ("layer-norm-triton", "no-bias", "y = (x - mean) * rstd * w + b", "y = (x - mean) * rstd * w", "no-bias",
     "y = (x - mean) * rstd * w"),
    # 一遍公式 E[x²] - E[x]²：只在均值比标准差大得多的行上错（灾难性抵消）
    ("layer-norm-triton", "one-pass", "        d = tl.where(mask, x - mean_b, 0.0)\n        m2_b = tl.sum(d * d, axis=0)",
     "        m2_b = tl.sum(x * x, axis=0) - n_b * mean_b * mean_b", "cancellation", "tl.sum(x * x"),
    # 先一遍求均值、再一遍求方差：结果对，x 读了三遍
    ("layer-norm-triton", "three-passes", "        mean_b = tl.sum(x, axis=0) / n_b\n",
     "        mean_b = tl.sum(x, axis=0) / n_b\n"
     "        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)\n", "memory-loads", "tl.load"),
    ("layer-norm-triton", "no-mean-store", "    tl.store(mean_ptr + row, mean)\n", "", "mean-not-written", "rstd ="),
    ("layer-norm-triton", "rstd-is-var", "    tl.store(rstd_ptr + row, rstd)", "    tl.store(rstd_ptr + row, m2 / n)",
     "rstd-wrong", "rstd_ptr + row, m2 / n"),
    ("layer-norm-triton", "row-times-n-cols", "x_row = x_ptr + row * x_row_stride", "x_row = x_ptr + row * n_cols",
     "row-stride", "row * n_cols"),
    ("layer-norm-triton", "unmasked-weight", "        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)",
     "        w = tl.load(w_ptr + cols).to(tl.float32)", "out-of-bounds", "tl.load(w_ptr + cols)"),
    ("layer-norm-triton", "store-float16", "y.to(y_ptr.dtype.element_ty)", "y.to(tl.float16)", "low-precision", "tl.float16"),
    ("layer-norm-triton", "no-store", "        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)", "        pass",
     "not-written", None),
    # col-sum-triton：二维块向下循环
    ("col-sum-triton", "col-offset", "cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)", "cols = tl.arange(0, BLOCK_N)",
     "col-offset", "cols = tl.arange"),
    ("col-sum-triton", "no-row-loop", "for start in range(0, n_rows, BLOCK_M):", "for start in range(0, 1):",
     "no-row-loop", "tl.load"),
    ("col-sum-triton", "rows-not-advanced", "rows = start + tl.arange(0, BLOCK_M)", "rows = tl.arange(0, BLOCK_M)",
     "rows-not-advanced", "rows = tl.arange"),
    ("col-sum-triton", "wrong-axis", "tl.sum(acc, axis=0)", "tl.sum(acc, axis=1)", "wrong-axis", "axis=1"),
    # 行距写成 N：只在行距大于 N 的视图上错
    ("col-sum-triton", "row-stride", "[:, None] * in_row_stride", "[:, None] * n_cols", "row-stride", "* n_cols"),
    ("col-sum-triton", "other-neg-inf", "mask=mask, other=0.0)", 'mask=mask, other=-float("inf"))', "mask-other",
     "other="),
    ("col-sum-triton", "rows-unmasked", "mask = (rows < n_rows)[:, None] & col_mask[None, :]", "mask = col_mask[None, :]",
     "out-of-bounds", "tl.load"),
    ("col-sum-triton", "load-twice", "        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)",
     "        v = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)\n"
     "        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32) + v - v", "memory-loads", "tl.load"),
    ("col-sum-triton", "no-store", "    tl.store(out_ptr + cols, tl.sum(acc, axis=0), mask=col_mask)", "    pass",
     "not-written", None),
    ("softmax-cuda", "max-init-zero", "float m = -INFINITY;", "float m = 0.0f;", "max-init", "float m = 0.0f;"),
    ("softmax-cuda", "no-max-subtraction", "expf(row_buf[j] - m)", "expf(row_buf[j])", "no-max-subtraction",
     "expf(row_buf[j])"),
    ("softmax-cuda", "no-normalize", "row_out[j] = row_buf[j] * inv;", "row_out[j] = row_buf[j];", "no-normalize",
     "row_out[j] = row_buf[j];"),
    ("softmax-cuda", "sum-of-warp-0", "s = warp_sum(lane < n_warps ? red[lane] : 0.0f);", "s = red[0];",
     "partial-sum", "warp_sum"),
    # 所有 warp 读完各自的最大值之前，lane 0 就把和写进了 red：模拟器报出共享内存竞争
    ("softmax-cuda", "missing-second-barrier", "    m = warp_max(lane < n_warps ? red[lane] : -INFINITY);\n    __syncthreads();",
     "    m = warp_max(lane < n_warps ? red[lane] : -INFINITY);", "shared-race", "red["),
    ("softmax-cuda", "missing-first-barrier", "        red[warp] = m;\n    __syncthreads();\n", "        red[warp] = m;\n",
     "shared-race", "red[lane]"),
    # 块内最大值只有 warp 内那一级：每个 warp 以自己的最大值为基准
    ("softmax-cuda", "warp-max-only", "    m = warp_max(lane < n_warps ? red[lane] : -INFINITY);\n",
     "    ;\n", "partial-max", "m = warp_max(m);"),
    ("softmax-cuda", "reads-twice", "float e = expf(row_buf[j] - m);", "float e = expf(row_in[j] - m);",
     "memory-loads", "expf(row_in[j] - m)"),
    ("softmax-cuda", "off-by-one", "    for (int64_t j = tid; j < cols; j += blockDim.x)\n        row_out",
     "    for (int64_t j = tid; j <= cols; j += blockDim.x)\n        row_out", "out-of-bounds", "row_out[j]"),
    ("softmax-cuda", "no-write", "        row_out[j] = row_buf[j] * inv;", "        ;", "not-written", None),
    ("softmax-cuda", "block-not-multiple-of-32", "#define BLOCK_SIZE 256", "#define BLOCK_SIZE 100", "block-size",
     "#define BLOCK_SIZE 100"),
    ("bank-conflicts", "strided-index", "const int ld = TILE + 1;", "const int ld = TILE;    ", "bank-conflict",
     "tile[tx * ld + ty + j]"),
    ("bank-conflicts", "missing-barrier", "    __syncthreads();\n", "\n", "shared-race", "tile[tx * ld + ty + j]"),
    ("bank-conflicts", "read-bound", "if (c < cols && r + j < rows)", "if (c <= cols && r + j < rows)", "out-of-bounds",
     "in[(int64_t)(r + j) * cols + c]"),
    ("bank-conflicts", "pitch-mismatch", "tile[tx * ld + ty + j]", "tile[tx * TILE + ty + j]", "uninitialized-read",
     "tile[tx * TILE + ty + j]"),
    ("reduce-sum-tilelang", "tail-tile", "n_tiles = T.ceildiv(N, block_n)", "n_tiles = N // block_n", "tail-tile",
     "n_tiles = N // block_n"),
    ("reduce-sum-tilelang", "no-write", "            y[bx] = acc[i]", "            pass", "not-written", "T.empty"),
    ("reduce-sum-tilelang", "undeclared", "T.reduce_sum(tile, part, dim=1)", "T.reduce_sum(tle, part, dim=1)",
     "undeclared", "tle"),
    ("reduce-sum-tilelang", "overwrite", "acc[i] += part[i]", "acc[i] = part[i]", "overwrite", "acc[i] = part[i]"),
    # 行尾之外保留 T.copy 补的 0：每行的和小于 1，诊断指向读整行的 T.copy
    ("softmax-tilelang", "no-mask", "            tile[i, j] = T.if_then_else(j < N, tile[i, j], NEG_INF)\n",
     "            tile[i, j] = tile[i, j]\n", "mask-other", "T.copy(x[bx, 0], tile)"),
    ("softmax-tilelang", "no-max-subtraction", "T.exp(tile[i, j] - row_max[i])", "T.exp(tile[i, j])",
     "no-max-subtraction", "T.exp(tile[i, j])"),
    ("softmax-tilelang", "no-normalize", "tile[i, j] = tile[i, j] / row_sum[i]", "tile[i, j] = tile[i, j] + 0.0",
     "no-normalize", "T.copy(tile, y[bx, 0])"),
    ("softmax-tilelang", "no-write", "        T.copy(tile, y[bx, 0])\n", "\n", "not-written", "T.empty"),
]


@pytest.mark.parametrize("name,mistake,old,new,key,line_text",
                         [pytest.param(*m, id=f"{m[0]}-{m[1]}", marks=[needs_tilelang] if "tilelang" in m[0] else [])
                          for m in MISTAKES])
def test_planted_mistake_gets_its_hint(name, mistake, old, new, key, line_text, tmp_path):
    dest, text = edited_solution(name, tmp_path, [(old, new)], mistake)
    result = labs.check(name, dest, bench=False)
    assert not result.passed
    keys = result.hint_keys()
    assert keys and keys[0] == key, result.report()
    if (name, mistake) in ONLY_HINT:
        assert keys == [key], result.report()
    hint = result.hints[0]
    if mistake in NOT_RUN:
        assert all(r.note.startswith("未运行") for r in result.results), result.report()
    if line_text is not None:
        assert hint.line is not None, result.report()
        assert line_text in text.splitlines()[hint.line - 1], result.report()
        assert f"{hint.file}:{hint.line}" in result.report()


#: 只该有这一条诊断：别的诊断会把学习者引到本来是对的代码上
ONLY_HINT = {("softmax-cuda", "no-max-subtraction"), ("softmax-cuda", "max-init-zero")}
#: 诊断的改法里必须出现的文字（通用的说明换成了这个实验自己的）
FIX_TEXT = {
    ("softmax-cuda", "missing-second-barrier"): "red",
    ("bank-conflicts", "missing-barrier"): "tile",
    ("bank-conflicts", "read-bound"): "c < cols",
}
#: 这些错误让评分在运行用例之前结束（死循环在检查用的小用例上几秒内报出，不在每个用例上跑满预算）
NOT_RUN = {"endless-loop", "endless-stride", "block-not-multiple-of-32", "cluster-too-large", "block-index", "plain-read",
           "no-publish", "wrong-turn"}

# 看起来像错误、其实是对的写法：评分必须让它们通过
# offset 从 1 开始每步翻倍：lane 0 照样得到 32 个数的和（每一步读的都是上一步已经合好的一段），只是加法的顺序不同；
# 换成蝶形 __shfl_xor_sync，每个 lane 都得到总和，lane 0 也不例外；线程块改成 512 个线程也没有问题。
CORRECT_VARIANTS = [
    ("warp-reduce-cuda", "offsets-ascending",
     [("for (int offset = 16; offset > 0; offset >>= 1)", "for (int offset = 1; offset < 32; offset <<= 1)")] * 2),
    ("warp-reduce-cuda", "xor-butterfly", [("__shfl_down_sync", "__shfl_xor_sync")] * 2),
    ("warp-reduce-cuda", "block-512", [("#define BLOCK_SIZE 256", "#define BLOCK_SIZE 512")]),
    ("reduce-sum-cuda", "double-accumulator", [("float acc = 0.0f;", "double acc = 0.0;")]),
    # full-sum-cuda：32 位的起点与步长在这些 n 上不溢出；一个 warp 的线程块；双精度的累加器
    ("full-sum-cuda", "block-32", [("#define BLOCK_SIZE 256", "#define BLOCK_SIZE 32")]),
    ("full-sum-cuda", "block-1024", [("#define BLOCK_SIZE 256", "#define BLOCK_SIZE 1024")]),
    ("full-sum-cuda", "double-accumulator", [("float acc = 0.0f;", "double acc = 0.0;")]),
    # 块内归约改成共享内存的树形归约（s 从 512 起、只加存在的槽位：评分也用 96 个线程，不是 2 的幂）
    ("full-sum-cuda", "tree-in-shared",
     [("    acc = warp_sum(acc);\n    if (lane == 0)\n        warp_sums[warp] = acc;\n    __syncthreads();\n\n"
       "    // 4. 第 0 个 warp 归约各 warp 的和\n    if (warp == 0) {\n"
       "        float s = warp_sum(lane < n_warps ? warp_sums[lane] : 0.0f);\n        // 5. 每块一次原子加\n"
       "        if (lane == 0)\n            atomicAdd(out, s);\n    }\n",
       "    __shared__ float sdata[1024];\n    sdata[tid] = acc;\n    __syncthreads();\n"
       "    for (unsigned int s = 512; s > 0; s >>= 1) {\n        if (tid < s && tid + s < blockDim.x)\n"
       "            sdata[tid] += sdata[tid + s];\n        __syncthreads();\n    }\n"
       "    if (tid == 0)\n        atomicAdd(out, sdata[0]);\n")]),
    # softmax-cuda：除以 s 而不是乘以 1/s；一个 warp 的线程块；每个线程先求最大值再另读一遍共享内存（不是显存）
    ("softmax-cuda", "divide", [("row_out[j] = row_buf[j] * inv;", "row_out[j] = row_buf[j] / s;")]),
    ("softmax-cuda", "block-32", [("#define BLOCK_SIZE 256", "#define BLOCK_SIZE 32")]),
    ("softmax-cuda", "block-1024", [("#define BLOCK_SIZE 256", "#define BLOCK_SIZE 1024")]),
    # 连续分段（每段向上取整、end 取 min）也是对的分法；total 从本块的 partial 开始、r 从 1 起；2 块或 8 块的簇
    ("cluster-reduce-cuda", "contiguous-slices",
     [("    for (int64_t j = (int64_t)rank * blockDim.x + tid; j < cols; j += (int64_t)CLUSTER_SIZE * blockDim.x)\n",
       "    int64_t per = (cols + CLUSTER_SIZE - 1) / CLUSTER_SIZE;\n    int64_t end = min(rank * per + per, cols);\n"
       "    for (int64_t j = rank * per + tid; j < end; j += blockDim.x)\n")]),
    ("cluster-reduce-cuda", "start-from-own-partial",
     [("float total = 0.0f;", "float total = partial;"), ("for (int r = 0;", "for (int r = 1;")]),
    # 各块把 partial 原子地加进 0 号块的 partial（分布式共享内存上的原子操作），再一次簇屏障之后 0 号块写出
    ("cluster-reduce-cuda", "atomic-into-rank0",
     [("    if (rank == 0 && tid == 0) {\n        float total = 0.0f;\n        for (int r = 0; r < CLUSTER_SIZE; ++r)\n"
       "            total += *cluster.map_shared_rank(&partial, r);\n        out[row] = total;\n    }\n",
       "    if (rank != 0 && tid == 0)\n        atomicAdd(cluster.map_shared_rank(&partial, 0), partial);\n"
       "    cluster.sync();\n    if (rank == 0 && tid == 0)\n        out[row] = partial;\n")]),
    # 全局常量写成 tl.constexpr(…)、辅助函数加上 @triton.jit：解释器与编译器都接受
    ("softmax-triton", "constexpr-global", [("@triton.jit\ndef softmax_kernel",
                                             'NEG = tl.constexpr(-float("inf"))\n\n\n@triton.jit\ndef softmax_kernel'),
                                            ('other=-float("inf")', "other=NEG")]),
    ("softmax-triton", "jit-helper", [("@triton.jit\ndef softmax_kernel",
                                       "@triton.jit\ndef row_max(x):\n    return tl.max(x, axis=0)\n\n\n@triton.jit\ndef softmax_kernel"),
                                      ("tl.exp(x - tl.max(x, axis=0))", "tl.exp(x - row_max(x))")]),
    # vector-loads-cuda：两头合成一个循环；对齐检查用 uintptr_t
    ("vector-loads-cuda", "one-edge-loop",
     [("    for (int64_t j = tid; j < head; j += blockDim.x)\n        acc += __bfloat162float(row_in[j]);\n"
       "    for (int64_t j = head + VEC * n_pack + tid; j < cols; j += blockDim.x)\n        acc += __bfloat162float(row_in[j]);\n",
       "    int64_t n_edge = cols - VEC * n_pack;\n    for (int64_t e = tid; e < n_edge; e += blockDim.x)\n"
       "        acc += __bfloat162float(row_in[e < head ? e : e + VEC * n_pack]);\n")]),
    ("vector-loads-cuda", "uintptr", [("(size_t)row_in % 16", "(uintptr_t)row_in % 16")]),
    # softmax-rows-triton：乘以和的倒数；exp2 换底（行号不转 int64 是错的：见 MISTAKES 的 int32-pid）
    ("softmax-rows-triton", "reciprocal", [("y = num / d[:, None]", "y = num * (1.0 / d)[:, None]")]),
    ("softmax-rows-triton", "exp2", [("num = tl.exp(x - m[:, None])", "num = tl.exp2((x - m[:, None]) * 1.4426950408889634)")]),
    ("cluster-reduce-cuda", "cluster-2", [("#define CLUSTER_SIZE 4", "#define CLUSTER_SIZE 2")]),
    ("cluster-reduce-cuda", "cluster-8-block-128", [("#define CLUSTER_SIZE 4", "#define CLUSTER_SIZE 8"),
                                                    ("#define BLOCK_SIZE 256", "#define BLOCK_SIZE 128")]),
]


@pytest.mark.parametrize("name,variant,edits", CORRECT_VARIANTS, ids=[f"{n}-{v}" for n, v, _ in CORRECT_VARIANTS])
def test_correct_variants_pass(name, variant, edits, tmp_path):
    dest, _ = edited_solution(name, tmp_path, edits, variant)
    result = labs.check(name, dest, bench=False)
    assert result.passed, result.report()


# Triton 解释器接受、编译器拒绝的写法：sim 模式下由评分程序的 sm_90 编译检查报出，gpu 模式下由真正的编译报出，
# 诊断相同。(实验, 名字, [(原文, 改成)], 诊断所指的行里应有的文字)
GPU_ONLY_COMPILE_ERRORS = [
    ("softmax-triton", "python-global",
     [("@triton.jit\ndef softmax_kernel", 'NEG = -float("inf")\n\n\n@triton.jit\ndef softmax_kernel'),
      ('other=-float("inf")', "other=NEG")], "other=NEG"),
    ("softmax-triton", "helper-without-jit",
     [("@triton.jit\ndef softmax_kernel", "def row_max(x):\n    return tl.max(x, axis=0)\n\n\n@triton.jit\ndef softmax_kernel"),
      ("tl.exp(x - tl.max(x, axis=0))", "tl.exp(x - row_max(x))")], "row_max(x)"),
    ("softmax-rows-triton", "python-global",
     [("@triton.jit\ndef softmax_rows_kernel", "LOG2E = 1.4426950408889634\n\n\n@triton.jit\ndef softmax_rows_kernel"),
      ("num = tl.exp(x - m[:, None])", "num = tl.exp2((x - m[:, None]) * LOG2E)")], "LOG2E"),
    ("rms-norm-triton", "helper-without-jit",
     [("@triton.jit\ndef rms_norm_kernel", "def mean_square(x, n):\n    return tl.sum(x * x, axis=0) / n\n\n\n"
                                         "@triton.jit\ndef rms_norm_kernel"),
      ("ms = tl.sum(x * x, axis=0) / n_cols", "ms = mean_square(x, n_cols)")], "mean_square(x, n_cols)"),
]


@pytest.mark.parametrize("name,mistake,edits,line_text", GPU_ONLY_COMPILE_ERRORS,
                         ids=[f"{m[0]}-{m[1]}" for m in GPU_ONLY_COMPILE_ERRORS])
def test_gpu_only_compile_errors_get_their_hint(name, mistake, edits, line_text, tmp_path):
    dest, text = edited_solution(name, tmp_path, edits, mistake)
    result = labs.check(name, dest, bench=False)
    assert not result.passed
    hint = result.hints[0]
    assert hint.key == "gpu-compile", result.report()
    assert hint.line is not None and line_text in text.splitlines()[hint.line - 1], result.report()
    if rl.MODE == "sim":                  # 用例都在解释器里通过了，是编译检查拦下的
        assert all(r.ok for r in result.results), result.report()
        assert "编译失败" in result.report()


@pytest.mark.skipif(rl.MODE != "sim", reason="sim 模式的编译检查；gpu 模式下用例本身就在 GPU 上编译")
@pytest.mark.parametrize("name", [n for n in NAMES if labs.get(n).backend == "triton"])
def test_sim_mode_compiles_the_triton_kernel_for_sm90(name, tmp_path):
    result = labs.check(name, copy_solution(name, tmp_path), bench=False)
    assert result.passed
    assert "编译检查（sm_90" in result.report() and "内核能编译成 GPU 的机器码" in result.report()


def test_planted_mistake_fix_texts_are_lab_specific(tmp_path):
    for (name, mistake), want in FIX_TEXT.items():
        m = next(m for m in MISTAKES if m[:2] == (name, mistake))
        dest = copy_solution(name, tmp_path / mistake)
        f = dest / labs.get(name).files[0]
        f.write_text(f.read_text(encoding="utf-8").replace(m[2], m[3], 1), encoding="utf-8")
        hint = labs.check(name, dest, bench=False).hints[0]
        assert want in hint.fix and "sdata" not in hint.fix + hint.cause, hint.render()


#: gpu 模式下 GPU 不会报出、要靠模拟器检查（extra_checks）找出的错误
GPU_HIDDEN = [("warp-reduce-cuda", m) for m in ("mask-excludes-source", "half-mask", "missing-barrier", "barrier-in-branch",
                                                "lanes-beyond-n-warps", "n-warps-hard-coded", "lanes-beyond-row-end",
                                                "endless-loop")] + \
             [("reduce-sum-cuda", m) for m in ("barrier-in-branch", "missing-barrier", "off-by-one", "endless-loop")] + \
             [("softmax-cuda", m) for m in ("missing-first-barrier", "missing-second-barrier", "off-by-one")] + \
             [("full-sum-cuda", m) for m in ("plain-add", "plain-store", "missing-barrier", "barrier-in-branch",
                                             "lanes-beyond-n-warps", "off-by-one", "endless-loop")] + \
             [("cluster-reduce-cuda", m) for m in ("no-first-cluster-sync", "no-final-cluster-sync",
                                                   "cluster-sync-in-rank0-branch", "rank-past-the-cluster")] + \
             [("ordered-sum-cuda", m) for m in ("block-index", "plain-read", "no-publish", "wrong-turn", "no-fence",
                                                "every-thread-adds")]


@pytest.mark.parametrize("name,mistake", GPU_HIDDEN, ids=[f"{n}-{m}" for n, m in GPU_HIDDEN])
def test_gpu_mode_precheck_finds_what_the_gpu_hides(name, mistake, tmp_path):
    """gpu 模式的模拟器检查（在 CPU 上就能运行）：给出与 sim 模式评分相同的第一条诊断；会让 GPU 挂起的错误不在 GPU 上运行用例。"""
    from reduction_lab.labs import core

    m = next(m for m in MISTAKES if m[:2] == (name, mistake))
    dest = copy_solution(name, tmp_path)
    lab = labs.get(name)
    f = dest / lab.files[0]
    f.write_text(f.read_text(encoding="utf-8").replace(m[2], m[3], 1), encoding="utf-8")
    paths = core._learner_paths(lab, dest)
    lines, hints = lab.extra_checks(lab.load(paths, "gpu"), "gpu", paths)
    assert [h.key for h in hints] == [m[4]], lines
    assert hints[0].cause.startswith("模拟器检查")
    if m[5] is not None:
        assert m[5] in f.read_text(encoding="utf-8").splitlines()[hints[0].line - 1]
    if m[4] in ("barrier-divergence", "endless-loop", "warp-sync", "spin-wait"):
        assert m[4] in core.BLOCKING


def test_gpu_mode_precheck_passes_the_solutions(tmp_path):
    from reduction_lab.labs import core

    for name in ("reduce-sum-cuda", "warp-reduce-cuda", "full-sum-cuda", "softmax-cuda", "cluster-reduce-cuda",
                 "bank-conflicts", "ordered-sum-cuda"):
        lab = labs.get(name)
        paths = core._learner_paths(lab, copy_solution(name, tmp_path))
        lines, hints = lab.extra_checks(lab.load(paths, "gpu"), "gpu", paths)
        assert hints == [] and "没有发现" in lines[0], lines


def test_cluster_lab_on_a_gpu_without_clusters_runs_the_cases_in_the_simulator(tmp_path, monkeypatch):
    """gpu 模式、计算能力低于 9.0 的 GPU（这里在 CPU 上模拟）：报告说明原因，用例改在模拟器里运行，不计时。"""
    from reduction_lab import runtime
    from reduction_lab.labs import cluster_reduce_cuda

    monkeypatch.setattr(cluster_reduce_cuda, "gpu_capability", lambda: (8, 0))
    monkeypatch.setattr(runtime, "MODE", "gpu")
    result = labs.check("cluster-reduce-cuda", copy_solution("cluster-reduce-cuda", tmp_path))
    assert result.passed, result.report()
    assert not result.bench and not any(r.case.gpu_only for r in result.results)
    assert "计算能力是 8.0" in result.report() and "模拟器里运行" in result.report()


#: gpu 模式下模拟器检查先发现、GPU 上可能非法访存的错误（越界、读已退出的块、越界的簇内编号）
GPU_UNSAFE_MISTAKES = [("reduce-sum-cuda", "off-by-one"), ("warp-reduce-cuda", "lanes-beyond-row-end"),
                       ("full-sum-cuda", "off-by-one"),
                       ("cluster-reduce-cuda", "row-is-block-index"), ("cluster-reduce-cuda", "no-final-cluster-sync"),
                       ("cluster-reduce-cuda", "rank-past-the-cluster")]


@pytest.mark.parametrize("name,mistake", GPU_UNSAFE_MISTAKES, ids=[f"{n}-{m}" for n, m in GPU_UNSAFE_MISTAKES])
def test_gpu_mode_does_not_launch_what_can_break_the_context(name, mistake, tmp_path, monkeypatch):
    """gpu 模式（这里在 CPU 上把 MODE 设成 gpu）：模拟器检查发现的越界之类的错误让评分不在 GPU 上运行用例。
    一次非法访存之后，同一进程里之后的 CUDA 调用都会失败（notebook 里直到重启内核）。这台机器没有 GPU：
    哪个用例真的启动了，就会以别的错误失败，而不是「未运行」。"""
    from reduction_lab import runtime
    from reduction_lab.labs import core

    m = next(m for m in MISTAKES if m[:2] == (name, mistake))
    dest = copy_solution(name, tmp_path)
    f = dest / labs.get(name).files[0]
    f.write_text(f.read_text(encoding="utf-8").replace(m[2], m[3], 1), encoding="utf-8")
    monkeypatch.setattr(runtime, "MODE", "gpu")
    result = labs.check(name, dest, bench=False)
    assert not result.passed
    assert result.hint_keys()[0] == m[4] and m[4] in core.GPU_UNSAFE, result.report()
    assert all(r.note.startswith("未运行：模拟器检查") for r in result.results), result.report()
    assert "用例没有在 GPU 上运行" in result.report()


@pytest.mark.skipif(rl.MODE != "gpu", reason="计时表只在 gpu 模式下、全部用例通过之后才有（sim 模式不计时）")
@pytest.mark.parametrize("name", [_param(n) for n in NAMES])
def test_gpu_timing_table(name, tmp_path):
    """gpu 模式：参考解全部通过之后，报告里有计时表（你的内核、对照与设备拷贝）；full-sum-cuda 另报原子加带来的结果种数。"""
    result = labs.check(name, copy_solution(name, tmp_path))
    assert result.passed and result.bench, result.report()
    assert result.bench[-1].name == "设备拷贝 copy_" and all(b.ms > 0 for b in result.bench), result.report()
    if name == "full-sum-cuda":
        assert "确定性：同一个输入运行 20 次" in result.report()


def test_full_sum_weights_model_the_mistakes():
    """诊断用的模型：正确的网格步长每个元素正好一次；几种错误的分法与逐个线程模拟的结果一致。"""
    from reduction_lab.labs.full_sum_cuda import weights

    def simulate(n, G, B, start, stride, blocks=None, lanes=None):
        w = torch.zeros(n, dtype=torch.float64)
        for b in (range(G) if blocks is None else blocks):
            for t in (range(B) if lanes is None else lanes):
                for j in range(start(b, t), n, stride):
                    w[j] += 1
        return w

    for n, G, B in [(1000, 3, 64), (5000, 8, 96), (31, 2, 32), (4097, 3, 256)]:
        assert torch.equal(simulate(n, G, B, lambda b, t: b * B + t, G * B), torch.ones(n, dtype=torch.float64))
        assert torch.equal(simulate(n, G, B, lambda b, t: b * B + t, B), weights(n, G, B, "block-stride"))
        assert torch.equal(simulate(n, G, B, lambda b, t: t, G * B), weights(n, G, B, "no-block-offset"))
        assert torch.equal(simulate(n, G, B, lambda b, t: b * B + t, G * B, blocks=[0]), weights(n, G, B, "first-block-only"))
        assert torch.equal(simulate(n, G, B, lambda b, t: b * B + t, G * B, lanes=range(32)),
                           weights(n, G, B, "first-warp-only"))


def test_full_sum_tolerance_holds_for_float32_orders():
    """容许值 2u sqrt(k) sum|x|：float32 按网格步长、块内与原子加的各种先后求和，都在它之内；模拟器的大用例上它比
    一个典型的元素小得多。"""
    from reduction_lab.labs.full_sum_cuda import sum_tolerance

    g = torch.Generator().manual_seed(0)
    for n, G, B, kind in [(100003, 8, 256, "randn"), (5000, 8, 96, "negative"), (1 << 20, 1056, 256, "randn"),
                          (1 << 20, 1056, 256, "offset")]:
        x = torch.randn(n, generator=g)
        x = -5 - x.abs() if kind == "negative" else x + 100 if kind == "offset" else x
        ref = x.double().sum().item()
        tol = sum_tolerance(x, G, B)
        pad = torch.zeros(-(-n // (G * B)) * G * B)
        pad[:n] = x
        per_thread = torch.zeros(G * B)
        for row in pad.reshape(-1, G * B):          # 网格步长：每个线程依次加（float32）
            per_thread = per_thread + row
        blocks = per_thread.reshape(G, B).sum(1)    # 块内（float32）
        for _ in range(3):                           # 原子加：随机的先后
            acc = torch.zeros(())
            for v in blocks[torch.randperm(G, generator=g)]:
                acc = acc + v
            assert abs(acc.item() - ref) <= tol, (n, kind, acc.item() - ref, tol)
        if n == 100003:                              # 模拟器里最大的用例：少加一个典型大小（~0.8）的元素就超出
            assert tol < 0.1, tol


def test_cluster_lab_model_matches_the_kernel():
    """诊断用的模型：本实验的分法与连续分段（向上取整）每列正好一次；几种错误的分法有重叠或空隙。"""
    from reduction_lab.labs.cluster_reduce_cuda import counts, model

    for n, b, c in ((37, 256, 4), (1000, 256, 4), (5000, 96, 2), (3000, 256, 8), (1, 32, 8)):
        assert (counts(n, b, c).sum(0) == 1).all()
        assert (counts(n, b, c, contiguous="ceil").sum(0) == 1).all()
    assert counts(1000, 256, 4, step=256).sum(0).max() == 4                     # 步长少了簇大小：行尾的列 4 块都读
    assert counts(1000, 96, 2, step=4 * 96).sum(0).min() == 0                  # 簇大小写死成 4：空隙
    assert counts(37, 32, 4, contiguous="floor").sum(0)[36] == 0               # 向下取整：行尾漏掉
    x = torch.randn(3, 1000, dtype=torch.float64)
    assert torch.allclose(model(x, 256, 4), x.sum(1))
    assert torch.allclose(model(x, 256, 4, ranks=[0]), x[:, :256].sum(1))


def test_cli_list_start_check(tmp_path, capsys):
    assert lab_cli.main(["lab", "list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == NAMES
    assert all(len(ln.split(maxsplit=1)) == 2 for ln in lines)

    d = tmp_path / "mine"
    assert lab_cli.main(["lab", "start", "reduce-sum-cuda", str(d)]) == 0
    out = capsys.readouterr().out
    assert "reduce_sum.cu" in out and f"reduction-lab lab check reduce-sum-cuda {d}" in out
    (d / "reduce_sum.cu").write_text("// 我的代码\n", encoding="utf-8")
    assert lab_cli.main(["lab", "start", "reduce-sum-cuda", str(d)]) == 0     # 已有的文件不覆盖
    assert "保留已有的" in capsys.readouterr().out
    assert (d / "reduce_sum.cu").read_text(encoding="utf-8") == "// 我的代码\n"

    shutil.copyfile(SOLUTIONS / "reduce-sum-cuda" / "reduce_sum.cu", d / "reduce_sum.cu")
    assert lab_cli.main(["lab", "check", "reduce-sum-cuda", str(d), "--backend", "nvidia"]) == 0
    assert "结论：全部" in capsys.readouterr().out
    assert lab_cli.main(["lab", "check", "reduce-sum-cuda", str(d), "--backend", "triton"]) == 2
    assert "softmax-triton" in capsys.readouterr().err
    assert lab_cli.main(["lab", "check", "no-such-lab"]) == 2
    err = capsys.readouterr().err
    assert "no-such-lab" in err and "逐个运行用例" not in err          # 先查名字，再开始评分
    assert lab_cli.main(["lab", "check", "bank-conflicts", str(tmp_path / "empty")]) == 2
    assert "lab start bank-conflicts" in capsys.readouterr().err


def test_top_level_cli_dispatches_lab(capsys):
    from reduction_lab.cli import main

    assert main(["lab", "list"]) == 0
    assert "reduce-sum-cuda" in capsys.readouterr().out


def test_default_dir_and_env(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert labs.start("softmax-triton") == Path("labs") / "softmax-triton"
    assert (tmp_path / "labs" / "softmax-triton" / "softmax.py").is_file()
    monkeypatch.setenv("REDUCTION_LAB_LABS", str(tmp_path / "root"))
    assert labs.default_dir("bank-conflicts") == tmp_path / "root" / "bank-conflicts"


@pytest.mark.parametrize("target,rc", [("solution", 0), ("skeleton", 1)])
def test_pytest_lab_option(target, rc, tmp_path):
    d = copy_solution("reduce-sum-cuda", tmp_path) if target == "solution" else labs.start(
        "reduce-sum-cuda", tmp_path / "sk")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "reduction_lab.labs.pytest_plugin",
                           "-q", "--lab", "reduce-sum-cuda",
                           "--backend", "cuda", "--lab-dir", str(d)], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == rc, proc.stdout + proc.stderr
    if rc:
        assert "TODO(1)" in proc.stdout and "reduce_sum.cu:" in proc.stdout
    else:
        assert " passed" in proc.stdout and "failed" not in proc.stdout



def test_readme_commands_work_inside_the_lab_folder(tmp_path, monkeypatch, capsys):
    """README 的两条命令（不带目录）在 lab start 给出的文件夹里运行：评的是当前目录的文件；
    文件不在时 pytest 只说一次怎么做（用法错误，返回 4），不给每个用例一份回溯。"""
    from reduction_lab.labs import cli as lab_cli

    d = copy_solution("reduce-sum-cuda", tmp_path)
    monkeypatch.chdir(d)
    assert lab_cli.main(["lab", "check", "reduce-sum-cuda", "--no-bench"]) == 0, capsys.readouterr()
    assert "结论：全部" in capsys.readouterr().out
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "reduction_lab.labs.pytest_plugin",
           "-q", "--lab", "reduce-sum-cuda", "--backend", "cuda"]
    proc = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
    assert proc.returncode == 0 and " passed" in proc.stdout, proc.stdout + proc.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run(cmd, cwd=empty, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out
    assert "lab start reduce-sum-cuda" in out and "Traceback" not in out and out.count("reduce_sum.cu") <= 2, out



@pytest.mark.skipif(rl.MODE != "sim", reason="每个用例的时间上限只在 sim 模式下设（GPU 上的内核不能从主机打断）")
def test_endless_triton_loop_times_out_at_the_learners_line(tmp_path, monkeypatch):
    """Triton 解释器里的死循环（while 的循环变量不变）：用例超时后报出学习者文件里的那一行，后面的用例不再运行。"""
    from reduction_lab.labs import grading

    monkeypatch.setattr(grading, "CASE_TIME_LIMIT_S", 2)
    old = ("    for start in range(0, n_rows, BLOCK_M):\n        rows = start + tl.arange(0, BLOCK_M)\n")
    new = ("    start = 0\n    while start < n_rows:\n        rows = start + tl.arange(0, BLOCK_M)\n")
    dest, text = edited_solution("col-sum-triton", tmp_path, [(old, new)], "endless-while")
    result = labs.check("col-sum-triton", dest, bench=False)
    assert not result.passed and result.hint_keys()[0] == "timeout", result.report()
    hint = result.hints[0]
    assert hint.file == "col_sum.py" and hint.line is not None
    assert 28 <= hint.line <= 36 and "死循环" in hint.cause, result.report()
    ran = [r for r in result.results if not r.note.startswith("未运行")]
    assert len(ran) == 1 and ran[0].note.startswith("超时"), result.report()


CUDA_FILES = [(name, kind) for name, lab in labs.LABS.items() if lab.files[0].endswith(".cu")
              for kind in ("skeleton", "solution")]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="PATH 上没有 nvcc：无法检查 CUDA 骨架能否编译")
@pytest.mark.parametrize("name,kind", CUDA_FILES, ids=[f"{n}-{k}" for n, k in CUDA_FILES])
def test_cuda_files_compile_with_nvcc(name, kind, tmp_path):
    """骨架（没有完成也要能编译）与参考解都能被 nvcc 编译；NVRTC 看到的源码（整数类型换成 typedef）行数不变。"""
    from reduction_lab.cuda_kernels.launcher import nvrtc_source

    lab = labs.get(name)
    src = lab.skeleton_dir() / lab.files[0] if kind == "skeleton" else SOLUTIONS / name / lab.files[0]
    text = src.read_text(encoding="utf-8")
    assert len(nvrtc_source(text).splitlines()) == len(text.splitlines())
    proc = subprocess.run(["nvcc", "-ptx", "-arch=sm_90", str(src), "-o", str(tmp_path / "k.ptx")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_recheck_in_the_same_process_sees_the_edited_file(tmp_path):
    """notebook 里改了学习者的 .cu 文件再评分：启动器按文件的修改时间与大小重新解析，用的是新代码。
    第二次改动与第一次等长（只换了一个字符），只靠大小分不出来。"""
    dest = copy_solution("reduce-sum-cuda", tmp_path)
    f = dest / "reduce_sum.cu"
    good = f.read_text(encoding="utf-8")
    assert labs.check("reduce-sum-cuda", dest, bench=False).passed
    f.write_text(good.replace("j < cols;", "j <= cols;"), encoding="utf-8")
    assert labs.check("reduce-sum-cuda", dest, bench=False).hint_keys()[0] == "out-of-bounds"
    bad = good.replace("sdata[tid + s]", "sdata[tid + 0]")
    assert len(bad) == len(good)
    f.write_text(bad, encoding="utf-8")
    assert not labs.check("reduce-sum-cuda", dest, bench=False).passed
    f.write_text(good, encoding="utf-8")
    assert labs.check("reduce-sum-cuda", dest, bench=False).passed
    # 评分与 labs.op 都经过启动器（cuda_kernels.launch），它的缓存看到的是同一个文件
    from reduction_lab.cuda_kernels import launcher

    assert any(str(k[0]) == str(f) for k in launcher._SPECS)


def test_html_report_for_notebooks(tmp_path):
    """notebook 里显示的是 HTML 表格：每个用例一行，诊断是 Material 的 failure 提示框，带文件与行号。"""
    import html

    dest = labs.start("reduce-sum-cuda", tmp_path / "sk")
    result = labs.check("reduce-sum-cuda", dest, bench=False)
    page = result._repr_html_()
    assert page.count("<tr>") == len(result.results) + 1
    assert 'class="admonition failure"' in page and "reduce_sum.cu:" in page
    assert html.escape("结论：") in page and "还没有完成" in page


@pytest.mark.parametrize("name", ["reduce-sum-cuda", "bank-conflicts"])
def test_missing_simulator_front_end_is_named_not_called_a_syntax_error(name, tmp_path, no_simt_front_end):
    """没有装 libclang 时，评分程序说缺的是哪个包、怎样装，而不是把正确的解答报成「语法错误」。"""
    result = labs.check(name, copy_solution(name, tmp_path), bench=False)
    assert not result.passed
    assert result.hint_keys()[0] == "environment", result.report()
    report = result.report()
    assert "libclang" in report and "pip install" in report and "语法错误" not in report, report


_FAULT_SCRIPT = r"""
import json, sys
from reduction_lab import labs
r = labs.check("reduce-sum-cuda", sys.argv[1], bench=False)
print(json.dumps({"notes": [c.note for c in r.results], "keys": r.hint_keys(), "report": r.report()}))
"""


@pytest.mark.gpu
@pytest.mark.skipif(rl.MODE != "gpu", reason="真实的非法访存只能在 GPU 上发生；sim 模式由上面的测试检查同一段逻辑")
def test_a_real_gpu_fault_stops_grading_in_a_fresh_process(tmp_path):
    """只在大形状（N > 4096，模拟器的预检查不跑这么大的用例）上读到 2^40 个元素之外：GPU 上真的非法访存。
    评分在那个用例之后停下，给出 gpu-fault 的诊断，其余的用例记为未运行。另起一个进程：非法访存之后这个进程的
    CUDA 上下文就不能再用了。"""
    dest = copy_solution("reduce-sum-cuda", tmp_path)
    f = dest / "reduce_sum.cu"
    old = "    const float *row_in = in + row * cols;\n"
    text = f.read_text(encoding="utf-8")
    assert old in text
    f.write_text(text.replace(old, old + "    if (cols > 4096) row_in += (int64_t)1 << 40;\n", 1), encoding="utf-8")
    p = subprocess.run([sys.executable, "-c", _FAULT_SCRIPT, str(dest)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    out = __import__("json").loads(p.stdout.strip().splitlines()[-1])
    notes = out["notes"]
    first = next(i for i, n in enumerate(notes) if n.startswith("未运行"))
    assert first >= 1 and all(n == f"未运行：用例 {first} 之后 CUDA 上下文已经失效" for n in notes[first:]), notes
    assert "gpu-fault" in out["keys"] and "REDUCTION_LAB_MODE=sim" in out["report"], out["report"]


def test_cases_stop_after_an_error_that_breaks_the_cuda_context():
    """非法访存之后，这个进程里的 CUDA 调用都报同一个错：评分在那个用例之后停下，说明原因、怎样找出那一行，
    后面的用例记为未运行；别的异常照常继续运行后面的用例。这里用抛出 CUDA 错误文字的运行函数代替 GPU。"""
    from reduction_lab.labs.grading import Case, Hint, gpu_context_lost, run_cases

    cases = [Case(f"c{i}", (2, 8)) for i in range(5)]
    ran = []

    def runner(case, error):
        ran.append(case.name)
        if case.name == "c1":
            raise error
        return True, 0.0, "", None

    def on_error(case, exc):
        return Hint("exception", f"运行时抛出 {type(exc).__name__}", "k.cu")

    fatal = RuntimeError("CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be ...")
    res = run_cases(cases, lambda c: runner(c, fatal), on_error)
    assert ran == ["c0", "c1"] and gpu_context_lost(fatal)
    assert [r.ok for r in res] == [True, False, False, False, False]
    assert res[1].hint.key == "gpu-fault" and "用例 2" in res[1].hint.cause and res[1].hint.file == "k.cu"
    assert "REDUCTION_LAB_MODE=sim" in res[1].hint.fix
    assert all(r.note == "未运行：用例 2 之后 CUDA 上下文已经失效" for r in res[2:])

    ran.clear()
    res = run_cases(cases, lambda c: runner(c, ValueError("bad shape")), on_error)
    assert ran == [f"c{i}" for i in range(5)] and res[1].hint.key == "exception" and res[4].ok
    assert not gpu_context_lost(ValueError("bad shape"))
    # 模拟器的错误说明里也写着「GPU 上是 misaligned address 错误」，但模拟器在访问之前就停下了：上下文没有失效
    from reduction_lab.simt.errors import SimtRuntimeError

    assert not gpu_context_lost(SimtRuntimeError("pack8 访问 in[1003] 的地址没有按 16 字节对齐（GPU 上是 misaligned address 错误）"))
    assert gpu_context_lost(RuntimeError("CUDA_ERROR_MISALIGNED_ADDRESS: misaligned address"))


def test_kernel_printf_goes_into_the_report_not_the_terminal(tmp_path, capsys):
    """学习者在内核里加 printf 调试：印出的行（模拟器里；GPU 上由驱动写到文件描述符 1）记在各用例上，报告摘出
    第一个失败的用例的前几行，终端上不会被十几个用例的输出淹没；都通过时摘第一个有输出的用例。"""
    dest = copy_solution("reduce-sum-cuda", tmp_path)
    f = dest / "reduce_sum.cu"
    loop = "        acc += row_in[j];\n"
    text = f.read_text(encoding="utf-8").replace(
        loop, loop + '    if (tid == 0) printf("row %lld partial %.1f\\n", (long long)row, acc);\n', 1)
    f.write_text(text, encoding="utf-8")
    result = labs.check("reduce-sum-cuda", dest, bench=False)
    assert result.passed and capsys.readouterr().out == ""
    assert result.results[0].output.startswith("row 0 partial ")
    report = result.report()
    assert "用例 1（课程用例，1x128）运行时印出了 1 行" in report and "    row 0 partial " in report
    assert "<pre><code>row 0 partial " in result._repr_html_()
    # 归约少做最后一步：第一个失败的用例是 1；16 行的用例印出 16 行，报告只列前 20 行
    f.write_text(text.replace("s > 0; s >>= 1", "s > 1; s >>= 1", 1), encoding="utf-8")
    result = labs.check("reduce-sum-cuda", dest, bench=False)
    assert not result.passed and capsys.readouterr().out == ""
    assert result.results[1].output.count("\n") == 16 and "用例 1（" in result.report()
    big = next(r for r in result.results if r.output.count("\n") > 20)
    from reduction_lab.labs.grading import output_excerpt
    title, lines = output_excerpt([big])
    assert "只列出前 20 行" in title and len(lines) == 20


def test_nvrtc_missing_host_header_gets_a_specific_fix():
    """gpu 模式下 CUDA 文件经 NVRTC 编译，它没有 <cstdio> 这样的主机头文件：调试时加上的 #include <cstdio>
    得到一条说清原因的诊断（printf 不用包含头文件），指向那一行。"""
    from reduction_lab.labs.hints import compile_hint

    exc = RuntimeError('CompileException: reduce_sum.cu(12): catastrophic error: cannot open source file "cstdio"\n'
                       '  #include <cstdio>\n                   ^\n')
    h = compile_hint(exc, "reduce_sum.cu")
    assert h.line == 12 and "<cstdio>" in h.cause and "printf" in h.fix
    h = compile_hint(RuntimeError("reduce_sum.cu(3): error: identifier \"x\" is undefined"), "reduce_sum.cu")
    assert h.line == 3 and h.cause == "编译错误"


def test_softmax_cuda_solution_reads_each_row_once(tmp_path):
    """softmax-cuda 的参考解（实验页的「对比」一节引用这些数）：每行从显存读 N 个、写 N 个 float，每块 3 次
    __syncthreads（求最大值的归约两次，求和的一次）；改成后两遍读 row_in 的内核，每行读 3 遍。"""
    from reduction_lab.cuda_kernels import launch

    dest = copy_solution("softmax-cuda", tmp_path)
    M, N, B = 8, 3000, 256
    x = torch.randn(M, N)
    out = torch.empty(M, N)
    rep = launch(dest / "softmax.cu", "softmax_rowwise_kernel", grid=M, block=B, args=(out, x, M, N),
                 shared_bytes=4 * N, defines={"BLOCK_SIZE": B}, mode="sim")
    assert rep.global_load_bytes == rep.global_store_bytes == 4 * M * N
    assert rep.barriers == 3 * M
    torch.testing.assert_close(out.double(), torch.softmax(x.double(), 1), atol=1e-7, rtol=1e-5)
    f = dest / "softmax.cu"
    text = f.read_text(encoding="utf-8")
    f.write_text(text.replace("expf(row_buf[j] - m)", "expf(row_in[j] - m)").replace(
        "row_out[j] = row_buf[j] * inv;", "row_out[j] = expf(row_in[j] - m) * inv;"), encoding="utf-8")
    rep = launch(f, "softmax_rowwise_kernel", grid=M, block=B, args=(out, x, M, N), shared_bytes=4 * N,
                 defines={"BLOCK_SIZE": B}, mode="sim")
    assert rep.global_load_bytes == 3 * 4 * M * N
    torch.testing.assert_close(out.double(), torch.softmax(x.double(), 1), atol=1e-7, rtol=1e-5)


def test_softmax_cuda_rejects_rows_that_do_not_fit_shared_memory(tmp_path):
    from reduction_lab.labs.softmax_cuda import MAX_COLS, make_op

    op = make_op(copy_solution("softmax-cuda", tmp_path) / "softmax.cu", "sim")
    with pytest.raises(ValueError, match=f"{MAX_COLS}"):
        op(torch.zeros(1, MAX_COLS + 1))
    y = op(torch.zeros(1, MAX_COLS))                      # 正好 48 KiB：放得下
    torch.testing.assert_close(y, torch.full((1, MAX_COLS), 1.0 / MAX_COLS))


def test_softmax_cuda_unwritten_output_is_not_blamed_on_the_max(tmp_path):
    """没写输出时，「数值很大」「整行是很大的负数」两个用例也是满屏 NaN：评分在普通输入上再跑一次同一个内核，
    说「没有写入」，不说 exp 溢出或最大值的初值；骨架的第一条诊断是 TODO(1)，步骤按行号列出。"""
    dest = labs.start("softmax-cuda", tmp_path / "skeleton")
    result = labs.check("softmax-cuda", dest, bench=False)
    assert result.hint_keys() == ["todo", "not-written"], result.report()
    assert "TODO(2)（第" in result.hints[0].detail and "TODO(5)" in result.hints[0].detail
    lines = [int(n) for n in re.findall(r"第 (\d+) 行", result.hints[0].detail)]
    assert lines == sorted(lines), result.hints[0].detail
    m = next(m for m in MISTAKES if m[:2] == ("softmax-cuda", "no-write"))
    dest = copy_solution("softmax-cuda", tmp_path / "no-write")
    f = dest / "softmax.cu"
    f.write_text(f.read_text(encoding="utf-8").replace(m[2], m[3], 1), encoding="utf-8")
    assert labs.check("softmax-cuda", dest, bench=False).hint_keys() == ["not-written"]


@needs_tilelang
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="PATH 上没有 nvcc：无法检查 gpu 模式下生成的 CUDA 能否编译")
@pytest.mark.parametrize("N", [1, 5, 128, 300, 781, 1000, 5000, 16384])
def test_softmax_tilelang_solution_lowers_to_cuda(N):
    """gpu 模式下骨架的 softmax() 给的参数（block_n、threads）：参考解降级成 sm_90 的 CUDA，nvcc 编译通过，
    每个线程至多 32 个 float（threads = block_n / 32）。"""
    import tilelang
    from tvm.target import Target

    from reduction_lab import tilelang_kernels as tk
    from reduction_lab.labs.core import load_module

    module = load_module(SOLUTIONS / "softmax-tilelang" / "softmax.py", "softmax_tilelang_cuda")
    block_n = 1 << (N - 1).bit_length()
    threads = min(512, max(32, block_n // 32))
    x = torch.empty(4, N, device="meta")
    prim = tk.retarget(module.softmax_kernel, tk.SM90_TARGET).get_tir(x, block_n=block_n, threads=threads, cpu=False)
    with Target(tk.SM90_TARGET) as tgt:
        src = tilelang.lower(prim, target=tgt).kernel_source
    assert f"__launch_bounds__({threads}" in src
    assert "ld.global" in tk.nvcc_check(src)
    assert block_n // threads <= 32


def test_check_only_selected_cases(tmp_path, capsys):
    """lab check --case K：只运行选中的用例（反复调试一个没通过的用例），其余不运行、不计入结论，也不计时；
    编号不存在时在运行任何东西之前报错。"""
    from reduction_lab.labs import cli

    dest = copy_solution("softmax-cuda", tmp_path)
    result = labs.check("softmax-cuda", dest, bench=False, cases=[2, 14])
    assert result.passed and result.partial
    ran = [r.index for r in result.results if not r.skipped]
    assert ran == [2, 14] and all(r.ok for r in result.results if not r.skipped)
    assert all(r.note == "未运行（--case）" for r in result.results if r.skipped)
    assert "选中的用例 2、14 都通过" in result.report() and "不加 --case 评全部" in result.report()
    assert "选中的用例 2、14 都通过" in result._repr_html_()
    # 只选一个失败的用例：结论说它没通过，诊断只来自它
    f = dest / "softmax.cu"
    f.write_text(f.read_text(encoding="utf-8").replace("float m = -INFINITY;", "float m = 0.0f;"), encoding="utf-8")
    failing = labs.check("softmax-cuda", dest, bench=False, cases=[10])
    assert not failing.passed and failing.hint_keys() == ["max-init"]
    assert "选中的用例 10 通过 0/1 个" in failing.report()
    assert labs.check("softmax-cuda", dest, bench=False, cases=[1]).passed
    for bad in ([0], [99], [], [True], ["3"]):
        with pytest.raises(labs.LabError, match="用例编号"):
            labs.check("softmax-cuda", dest, bench=False, cases=bad)
    assert cli.main(["lab", "check", "softmax-cuda", str(dest), "--case", "1,2"]) == 0
    assert "选中的用例 1、2 都通过" in capsys.readouterr().out
    assert cli.main(["lab", "check", "softmax-cuda", str(dest), "--case", "10"]) == 1
    capsys.readouterr()
    assert cli.main(["lab", "check", "softmax-cuda", str(dest), "--case", "x"]) == 2
    assert "--case" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["softmax-triton", "softmax-rows-triton", "online-softmax"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_softmax_tolerance_is_relative(name, dtype):
    """softmax 用相对容差：全是 0 或差 2% 的输出不通过，舍入到输出 dtype 的参考（以及截断到下一个
    可表示值的参考，解释器的转换）通过。"""
    from reduction_lab.labs.grading import compare

    x = torch.randn(37, 1000, generator=torch.Generator().manual_seed(0)).to(dtype)
    ref = torch.softmax(x.double(), dim=1)
    atol, rtol = labs.get(name).tolerance(x)
    assert not compare(torch.zeros_like(x), ref, atol, rtol)[0]
    assert not compare((ref * 0.98).to(dtype), ref, atol, rtol)[0]
    assert compare(ref.to(dtype), ref, atol, rtol)[0]
    truncated = torch.where(ref.to(dtype).double() > ref, torch.nextafter(ref.to(dtype), torch.zeros_like(x)), ref.to(dtype))
    assert compare(truncated, ref, atol, rtol)[0]


def test_float32_softmax_tolerance_catches_a_lost_warp():
    """float32：行内数值接近（输出都约为 1/N）、N = 4097、1024 个线程时，漏掉一个 warp 的部分和（输出大 1/31）
    不通过，而 ``__expf`` 级别的误差（相对 6e-6）通过。原来的 atol 1e-5 是 1/N 的 4%，前者也能通过。"""
    from reduction_lab.labs.grading import compare, softmax_tolerance

    x = 0.01 * torch.randn(64, 4097, generator=torch.Generator().manual_seed(1))
    ref = torch.softmax(x.double(), dim=1)
    atol, rtol = softmax_tolerance(torch.float32)
    assert not compare((ref * 32 / 31).float(), ref, atol, rtol)[0]
    assert compare((ref * (1 + 6e-6)).float(), ref, atol, rtol)[0]
    assert compare(torch.softmax(x, dim=1), ref, atol, rtol)[0]
    assert compare(ref * 32 / 31, ref, 1e-5, 1e-5)[0]          # 原来的容差：漏掉的 warp 通过


def test_softmax_rows_default_block_m_matches_the_skeleton():
    """评分程序的「沿错了轴」模型按 default_block_m 分组：它必须与骨架里包装函数的 rows_per_program 一致。"""
    from reduction_lab.labs.core import load_learner_module
    from reduction_lab.labs.softmax_rows_triton import default_block_m

    lab = labs.get("softmax-rows-triton")
    module = load_learner_module(lab.skeleton_dir() / lab.files[0], "softmax_rows_skeleton", ("rows_per_program",))
    for n in (1, 2, 100, 128, 300, 781, 1000, 1024, 2048, 4096, 4097, 32768):
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            assert module.rows_per_program(n, dt) == default_block_m(n, dt), (n, dt)


@pytest.mark.parametrize("block_m", [0, 3, 128, True, 2.0])
def test_softmax_rows_rejects_a_bad_block_m(block_m, tmp_path):
    from reduction_lab.labs.core import load_learner_module

    dest = copy_solution("softmax-rows-triton", tmp_path)
    module = load_learner_module(dest / "softmax_rows.py", "softmax_rows_sol", ("softmax",))
    with pytest.raises(ValueError, match="block_m"):
        module.softmax(torch.randn(4, 8, device=rl.DEVICE), block_m=block_m)


@pytest.mark.parametrize("name", ["softmax-triton", "softmax-rows-triton", "online-softmax", "rms-norm-triton",
                                  "layer-norm-triton", "col-sum-triton"])
def test_triton_compile_error_line_counts_from_the_labs_own_kernel(name):
    """gpu 模式下 Triton 的编译错误写「at 行:列」，从内核的 def 那一行数起：每个 Triton 实验按自己的内核名找起点。"""
    from reduction_lab.labs.softmax_triton import _compile_line

    lab = labs.get(name)
    text = (SOLUTIONS / name / lab.files[0]).read_text(encoding="utf-8")
    start = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith(f"def {lab.kernel}("))
    assert _compile_line(RuntimeError("at 3:8: error"), text, lab.kernel) == start + 2


@pytest.mark.parametrize("mode", ["sim", "gpu"])
def test_row_stride_input_keeps_its_row_stride(mode):
    """「行距大于 N 的视图」在两种模式下都是视图（gpu 模式下搬到设备上之后才切片）。"""
    from reduction_lab.labs import cases as C

    if mode == "gpu" and rl.MODE != "gpu":
        pytest.skip("需要 GPU：gpu 模式的输入在 cuda 上")
    case = next(c for c in C.col_sum_cases(mode) if c.kind == "row-stride")
    x = C.make_input(case, mode)
    assert x.shape == case.shape and x.stride() == (case.shape[1] + 7, 1)


def test_find_line_skips_python_docstrings():
    """Python 源码里的文档字符串提到 T.Serial，诊断也不应指向文档字符串，而是指向真正的代码行。"""
    from reduction_lab.labs.grading import find_line

    text = ('"""Use T.Serial here."""\nimport x\n\n\ndef f():\n    """T.Serial in the docs\n    more"""\n'
            '    for k in T.Serial(n):  # T.Serial\n        pass\n')
    assert find_line(text, r"T\.Serial", lang="py") == 8
    assert find_line("int a; // T.Serial\nT.Serial(x);\n", r"T\.Serial") == 2


def test_ordered_sum_wait_that_cannot_finish_is_not_called_a_budget_overrun(tmp_path):
    """等不到的循环（SpinWaitError）不是工作预算用完：结论行说「等不到」，不附预算的说明，也不提学习者传不了的 schedule。"""
    dest, _ = edited_solution("ordered-sum-cuda", tmp_path, [("    int seg = seg_s;", "    int seg = blockIdx.x;")],
                              "block-index")
    report = labs.check("ordered-sum-cuda", dest, bench=False).report()
    assert "循环里等的值等不到，用例没有运行" in report
    assert "工作预算" not in report and "确实要依赖这个顺序时" not in report


def test_ordered_sum_volatile_wait_and_release_pass(tmp_path):
    """等轮次也可以用 volatile 读、交出轮次也可以用 volatile 写（PTX 里都是强操作，与原子操作之间不算竞争）：
    评分程序不报竞争，全部用例通过。"""
    dest, _ = edited_solution("ordered-sum-cuda", tmp_path, [
        ("while (atomicAdd(&counters[1], 0) != seg)", "while (((volatile int*)counters)[1] != seg)"),
        ("        atomicExch(&counters[1], seg + 1);", "        ((volatile int*)counters)[1] = seg + 1;")],
        "volatile-wait")
    result = labs.check("ordered-sum-cuda", dest, bench=False)
    assert result.passed, result.report()


def test_ordered_sum_with_cuda_atomic_ref_and_renamed_parameters_passes(tmp_path):
    """libcu++ 的写法：cuda::atomic_ref 领票号、acquire 读轮次、release 交出轮次；参数改了名字，计数用例照样只数写进
    第一个参数的次数。"""
    dest, text = edited_solution("ordered-sum-cuda", tmp_path, [
        ("while (atomicAdd(&counters[1], 0) != seg) { }",
         "cuda::atomic_ref<int, cuda::thread_scope_device> turn(counters[1]);\n"
         "        while (turn.load(cuda::memory_order_acquire) != seg) { }"),
        ("        atomicExch(&counters[1], seg + 1);", "        turn.store(seg + 1, cuda::memory_order_release);")],
        "atomic-ref")
    f = dest / labs.get("ordered-sum-cuda").files[0]
    text = "#include <cuda/atomic>\n" + text.replace("*out", "*result").replace("float *out", "float *result")
    f.write_text(text, encoding="utf-8")
    result = labs.check("ordered-sum-cuda", dest, bench=False)
    assert result.passed, result.report()


def test_repeat_results_counts_distinct_sums():
    """三个全数组求和实验在 gpu 模式下数「运行 20 次得到几种结果」用的函数：在 CPU 上也能检查它的计法。"""
    from reduction_lab.labs.full_sum_cuda import REPEATS, repeat_results

    x = torch.arange(10, dtype=torch.float32)
    calls = []

    def op(t):
        calls.append(1)
        return t.sum() + (len(calls) % 2) * 0.5      # 交替得到两种结果

    distinct, ref = repeat_results(op, x)
    assert len(calls) == REPEATS and distinct == [45.0, 45.5] and ref == 45.0


def test_grid_larger_than_resident_blocks_gets_its_own_hint():
    """手写的网格屏障、网格大于同时驻留的块数（模拟器按 "waves" 执行时等不到）：诊断说网格太大，不是通用的等不到。"""
    import numpy as np

    from reduction_lab import simt
    from reduction_lab.labs.core import BLOCKING
    from reduction_lab.labs.hints import simt_hint

    src = ("__global__ void k(int* count) {\n"
           "    extern __shared__ float buf[];\n"
           "    if (threadIdx.x == 0) {\n"
           "        atomicAdd(count, 1);\n"
           "        while (atomicAdd(count, 0) < gridDim.x) { }\n"
           "    }\n}\n")
    smem = 120 * 1024
    with pytest.raises(simt.SpinWaitError) as ei:
        simt.launch(src, "k", 133, 32, (np.zeros(1, np.int32),), shared_bytes=smem, max_dynamic_shared_bytes=smem)
    h = simt_hint(ei.value, "k.cu", src)
    assert h.key == "not-resident" and h.key in BLOCKING and h.line == 5
    assert "同时驻留" in h.cause and "网格步长" in h.fix and "132" in h.detail
