"""每个 .cu 文件都能用 nvcc 编译成 sm_90 的 PTX（不需要 GPU），且导出的内核名没有被改编（extern "C"）。

CI 机器上有 nvcc；没有 nvcc 的机器跳过这些测试，并说明原因。
"""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from reduction_lab.cuda_kernels import KERNEL_DIR, kernel_names

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc 不在 PATH 上，无法检查 .cu 能否编译")

# 每个文件要检查的编译期常量组合（BLOCK_SIZE 取允许范围的两端和默认值）
CONFIGS = {
    "reduce_sum.cu": [{"BLOCK_SIZE": 32}, {"BLOCK_SIZE": 256}, {"BLOCK_SIZE": 1024}],
    "full_sum.cu": [{"BLOCK_SIZE": 64}, {"BLOCK_SIZE": 256}, {"BLOCK_SIZE": 1024}],
    "softmax.cu": [{"BLOCK_SIZE": 32}, {"BLOCK_SIZE": 1024}],
    "softmax_backward.cu": [{"BLOCK_SIZE": 32}, {"BLOCK_SIZE": 1024}],
    "bank_conflicts.cu": [{}, {"WIDE_FLOAT4": 1}],
    "tree_demo.cu": [{}],
    "warp_shuffle.cu": [{}],
    # CUB 的头文件随 CUDA 工具包（CCCL）一起装好，nvcc 不需要 -I
    "primitives.cu": [{"BLOCK_SIZE": 32}, {"BLOCK_SIZE": 256}, {"BLOCK_SIZE": 1024}],
    "primitives_cub.cu": [{"BLOCK_SIZE": 32}, {"BLOCK_SIZE": 256}, {"BLOCK_SIZE": 1024}],
    "softmax_cluster.cu": [{"CLUSTER_SIZE": 1, "USE_BF16": 0}, {"CLUSTER_SIZE": 16, "USE_BF16": 0},
                           {"CLUSTER_SIZE": 2, "USE_BF16": 1}, {"CLUSTER_SIZE": 16, "USE_BF16": 1}],
    "cluster_demo.cu": [{}, {"CLUSTER_SIZE": 2, "BLOCK": 32}, {"CLUSTER_SIZE": 8, "BLOCK": 1024}],
}

CASES = [(f, d) for f, ds in CONFIGS.items() for d in ds]


def _nvcc(path, defines, tmp_path):
    out = tmp_path / (path.stem + ".ptx")
    cmd = [NVCC, "-ptx", "-arch=sm_90", *[f"-D{k}={v}" for k, v in defines.items()], str(path), "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return r, out


def test_every_cu_file_is_listed():
    assert sorted(CONFIGS) == sorted(p.name for p in KERNEL_DIR.glob("*.cu"))


@needs_nvcc
@pytest.mark.parametrize("name,defines", CASES, ids=[f"{f}-{'-'.join(map(str, d.values())) or 'default'}"
                                                       for f, d in CASES])
def test_cu_compiles_for_sm90(name, defines, tmp_path):
    r, out = _nvcc(KERNEL_DIR / name, defines, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr.lower(), r.stderr
    entries = re.findall(r"\.entry\s+(\w+)\s*\(", out.read_text())
    # extern "C"：PTX 里的入口名就是源码里的名字，CuPy 才能按名字找到
    assert entries == kernel_names(name)


@needs_nvcc
@pytest.mark.parametrize("name,bad", [("reduce_sum.cu", 48), ("full_sum.cu", 32), ("softmax.cu", 2048)])
def test_bad_block_size_is_a_compile_error(name, bad, tmp_path):
    r, _ = _nvcc(KERNEL_DIR / name, {"BLOCK_SIZE": bad}, tmp_path)
    assert r.returncode != 0
    assert "BLOCK_SIZE must be a power of two" in r.stderr
