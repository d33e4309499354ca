"""数值与确定性（页面：docs/numerics.md）。

* 课程版 CUDA 内核的加法顺序由源码固定：与按同样顺序计算的 numpy 模型逐位相同（两种模式）；
* ``row_sum(..., deterministic=True)``：分段时不用原子加，结果逐位可重复，两次启动，访存 MN + 2M*段数 + M。
"""

import numpy as np
import pytest
import torch

import reduction_lab as rl
from reduction_lab import cuda_kernels as ck
from reduction_lab.triton_kernels.row_sum import row_sum


def _tree_order(x, B):
    part = np.zeros((x.shape[0], B), np.float32)
    for j in range(0, x.shape[1], B):
        part[:, : min(B, x.shape[1] - j)] += x[:, j:j + B]
    while part.shape[1] > 1:
        h = part.shape[1] // 2
        part = part[:, :h] + part[:, h:]
    return part[:, 0]


@pytest.mark.parametrize("B", [32, 256])
def test_course_cuda_kernel_adds_in_source_order(B):
    rng = np.random.default_rng(1)
    x = rng.random((3, 1000), dtype=np.float32)          # 1000 不是 B 的倍数：最后一轮只有部分线程
    y = ck.reduce_sum(torch.from_numpy(x).to(rl.DEVICE), kernel="tree", block_size=B).cpu().numpy()
    assert np.array_equal(y, _tree_order(x, B))
    assert not np.array_equal(_tree_order(x, 32), _tree_order(x, 256))   # 块大小确实改变了顺序


def test_deterministic_split_row_sum_is_reproducible_and_counted():
    torch.manual_seed(0)
    M, N, ns = 3, 3 * 4096 + 5, 4                          # 最后一段不满
    x = torch.rand(M, N).to(rl.DEVICE)
    ys = [row_sum(x, n_split=ns, deterministic=True) for _ in range(3)]
    assert all(torch.equal(ys[0], y) for y in ys[1:])
    assert torch.allclose(ys[0].double(), x.double().sum(dim=1), rtol=1e-6, atol=0)
    with rl.count_memory() as rep:
        row_sum(x, n_split=ns, deterministic=True)
    assert rep.launches == 2
    assert rep.elements_loaded == M * N + M * ns and rep.elements_stored == M * ns + M


def test_deterministic_float64_and_arguments():
    torch.manual_seed(0)
    x = torch.rand(2, 9000, dtype=torch.float64).to(rl.DEVICE)
    y = row_sum(x, n_split=2, deterministic=True)
    assert y.dtype == torch.float64 and torch.allclose(y, x.sum(dim=1), rtol=1e-12, atol=0)
    # 不切段时 deterministic 不改变任何事
    z = torch.rand(2, 100).to(rl.DEVICE)
    assert torch.equal(row_sum(z, deterministic=True), row_sum(z))
    with pytest.raises(TypeError):
        row_sum(z, deterministic=1)
