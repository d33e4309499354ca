"""检查器：每种错误各有一组故意埋下的错误；课程风格的正确内核一个也不报。"""

import numpy as np
import pytest

from reduction_lab import simt
from reduction_lab.simt.examples import BANK, REDUCE, ROW_SOFTMAX, ROW_SUM

PRE = "#define BLOCK 64\n"
TREE_HEAD = r"""
__global__ void k(const float* x, float* out) {
    __shared__ float s[BLOCK];
    int tid = threadIdx.x;
    s[tid] = x[blockIdx.x * BLOCK + tid];
    __syncthreads();
"""


def launch_tree(body, block=64, blocks=4):
    src = PRE.replace("64", str(block)) + TREE_HEAD + body + "\n}\n"
    x = np.ones(blocks * block, np.float32)
    out = np.zeros(blocks, np.float32)
    return simt.launch(src, "k", blocks, block, (x, out)), out


def test_barrier_inside_branch_is_reported():
    with pytest.raises(simt.BarrierDivergenceError) as e:
        launch_tree("""
    for (int k = BLOCK / 2; k > 0; k >>= 1) {
        if (tid < k) { s[tid] += s[tid + k]; __syncthreads(); }
    }
    if (tid == 0) out[blockIdx.x] = s[0];""")
    msg = str(e.value)
    assert "第 10 行" in msg and "line 10" in msg and "(0,0,0)" in msg and "32" in msg


def test_early_return_before_barrier_is_reported():
    src = r"""
__global__ void k(const float* x, float* out, int n) {
    __shared__ float s[64];
    int i = blockIdx.x * 64 + threadIdx.x;
    if (i >= n) return;
    s[threadIdx.x] = x[i];
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}"""
    x = np.ones(250, np.float32)
    out = np.zeros(4, np.float32)
    with pytest.raises(simt.BarrierDivergenceError, match=r"line 7.*block \(3,0,0\)") as e:
        simt.launch(src, "k", 4, 64, (x, out, 250))
    assert "return" in str(e.value)
    # n 是 64 的倍数时整个线程块一起退出：没有错误
    simt.launch(src, "k", 4, 64, (np.ones(256, np.float32), out, 192))


def test_different_barriers_in_two_branches():
    with pytest.raises(simt.BarrierDivergenceError, match="line 9"):
        launch_tree("""
    if (tid < 32) { __syncthreads(); } else { __syncthreads(); }""")


def test_missing_barrier_between_tree_steps_cross_warp():
    with pytest.raises(simt.SharedMemoryRaceError) as e:
        launch_tree("""
    for (int k = BLOCK / 2; k > 0; k >>= 1) {
        if (tid < k) s[tid] += s[tid + k];
    }
    if (tid == 0) out[blockIdx.x] = s[0];""", block=128)
    msg = str(e.value)
    assert "RAW" in msg and "__syncthreads()" in msg and "不同的线程束" in msg and "line 10" in msg


def test_warp_unrolled_with_or_without_volatile_is_a_race():
    body = """
    for (int k = BLOCK / 2; k > 32; k >>= 1) { if (tid < k) s[tid] += s[tid + k]; __syncthreads(); }
    if (tid < 32) {
        s[tid] += s[tid + 32]; s[tid] += s[tid + 16]; s[tid] += s[tid + 8];
        s[tid] += s[tid + 4]; s[tid] += s[tid + 2]; s[tid] += s[tid + 1];
    }
    if (tid == 0) out[blockIdx.x] = s[0];"""
    with pytest.raises(simt.SharedMemoryRaceError) as e:
        launch_tree(body, block=128)
    msg = str(e.value)
    assert "Volta" in msg and "volatile" in msg and "__syncwarp" in msg and "line 11" in msg
    # 同样的代码通过 volatile 指针访问（Harris 的原版写法）：Volta 之后仍是数据竞争
    head, tail = body.split("if (tid < 32) {")
    tail = tail.replace("s[tid] +=", "vs[tid] +=").replace("+= s[", "+= vs[")
    with pytest.raises(simt.SharedMemoryRaceError) as e:
        launch_tree(head + "if (tid < 32) { volatile float* vs = s;" + tail, block=128)
    msg = str(e.value)
    assert "RAW" in msg and "同一线程束" in msg and "__syncwarp()" in msg and "line 11" in msg


def test_syncwarp_orders_lanes_of_a_warp():
    rep, out = launch_tree("""
    for (int k = BLOCK / 2; k > 32; k >>= 1) { if (tid < k) s[tid] += s[tid + k]; __syncthreads(); }
    if (tid < 32) {
        float v = s[tid] + s[tid + 32];
        __syncwarp(); s[tid] = v; __syncwarp();
        for (int o = 16; o > 0; o >>= 1) { v += s[tid + o]; __syncwarp(); s[tid] = v; __syncwarp(); }
    }
    if (tid == 0) out[blockIdx.x] = s[0];""", block=256)
    assert (out == 256).all()
    assert rep.warp_syncs == 4 * 12


def test_volatile_does_not_excuse_cross_warp_hazards():
    with pytest.raises(simt.SharedMemoryRaceError, match="WAR|RAW"):
        launch_tree("""
    volatile float* vs = s;
    if (tid < 64) vs[tid] += vs[tid + 32];
    if (tid == 0) out[blockIdx.x] = vs[0];""", block=128)


def test_broadcast_then_overwrite_without_barrier_is_war():
    with pytest.raises(simt.SharedMemoryRaceError, match="WAR"):
        launch_tree("""
    float first = s[0];
    if (tid == 0) s[0] = 2.0f * first;""")


def test_out_of_bounds_global_read_off_by_one():
    src = r"""
__global__ void k(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i % 16] = x[i];
}"""
    x = np.ones(100, np.float32)
    out = np.zeros(16, np.float32)
    with pytest.raises(simt.OutOfBoundsError) as e:
        simt.launch(src, "k", 2, 64, (x, out, 100))
    msg = str(e.value)
    assert isinstance(e.value, IndexError)
    assert "x[100]" in msg and "line 4" in msg and "1 element(s) past the end" in msg and "(1,0,0)" in msg and "(36,0,0)" in msg
    assert out.sum() == 0  # 检查发生在访问之前：这条指令什么也没写


def test_out_of_bounds_shared_and_negative_index():
    with pytest.raises(simt.OutOfBoundsError, match=r"s\[64\].*shared"):
        launch_tree("    out[blockIdx.x] = s[tid + 1];")
    with pytest.raises(simt.OutOfBoundsError, match="before the start"):
        launch_tree("    int j = tid - 1; out[blockIdx.x] = s[j];")
    # 无符号回绕：0u - 1 是一个很大的下标
    with pytest.raises(simt.OutOfBoundsError, match="4294967295"):
        launch_tree("    out[blockIdx.x] = s[threadIdx.x - 1];")


def test_dynamic_shared_without_size_is_out_of_bounds():
    x = np.ones(256, np.float32)
    out = np.zeros(1, np.float32)
    with pytest.raises(simt.OutOfBoundsError, match="shared_bytes"):
        simt.launch(REDUCE, "reduce2", 1, 256, (x, out, 256))


def test_infinite_loop_hits_the_limit():
    src = "__global__ void k(int* o) {\n int i = 0;\n while (i < 10) { o[threadIdx.x] = i; }\n}"
    with pytest.raises(simt.LoopLimitError, match="line 3"):
        simt.launch(src, "k", 1, 32, (np.zeros(32, np.int32),), max_loop_iterations=500)


@pytest.mark.parametrize("code,line,word", [
    ("__global__ void k(float* o) {\n  goto end;\n  end: o[0] = 1.0f;\n}", 2, "goto"),
    ("__global__ void k(float* o) {\n  o[0] = 1.0f;\n  union U { int a; } u;\n}", 3, "union"),
    ("__global__ void k(float* o) {\n\n  printf(\"%p\", o);\n}", 3, "printf"),     # printf 本身支持，%p 不支持
    ("__global__ void k(float* o) {\n  int a = 1;\n  asm volatile(\"nop\");\n}", 3, "asm"),
    ("__global__ void k(float* o) {\n  for (int a = 0; a < 2; a++)\n    switch (a) { case 1: continue; }\n}", 3, "switch"),
    ("__global__ void k(float* o) {\n  o[0] = __byte_perm(3, 4, 5);\n}", 2, "__byte_perm"),
])
def test_unsupported_constructs_name_their_line(code, line, word):
    with pytest.raises(simt.UnsupportedError) as e:
        simt.launch(code, "k", 1, 1, (np.zeros(1, np.float32),))
    msg = str(e.value)
    assert f"line {line}" in msg and word in msg


# ---------------------------------------------------------------- 课程风格的正确内核

N = 1 << 14


@pytest.mark.parametrize("name,per_block", [
    ("reduce0", 1), ("reduce1", 1), ("reduce2", 1), ("reduce3", 2), ("reduce4", 2), ("reduce5", 2), ("reduce6", 16)])
def test_seven_versions_run_clean_and_correct(name, per_block):
    rng = np.random.default_rng(0)
    x = rng.integers(-8, 9, N).astype(np.float32)  # 小整数：任何求和顺序都精确
    nb = N // 256 // per_block
    out = np.zeros(nb, np.float32)
    rep = simt.launch(REDUCE, name, nb, 256, (x, out, N), shared_bytes=256 * 4)
    assert out.sum() == x.sum()
    assert rep.global_load_bytes == 4 * N
    assert rep.global_store_bytes == 4 * nb


def test_awkward_size_and_shuffle_with_atomic_add():
    rng = np.random.default_rng(1)
    n = 10_000
    x = rng.integers(-8, 9, n).astype(np.float32)
    out = np.zeros(1, np.float32)
    rep = simt.launch(REDUCE, "reduce_shfl", 8, 192, (x, out, n))
    assert out[0] == x.sum()
    assert rep.atomic_ops == 8
    out = np.zeros(3, np.float32)
    simt.launch(REDUCE, "reduce2", 3, 256, (x[:700].copy(), out, 700), shared_bytes=1024)
    assert out.sum() == x[:700].sum()


def test_row_sum_and_row_softmax_clean():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 300)).astype(np.float32)
    out = np.zeros(6, np.float32)
    simt.launch(ROW_SUM, "row_sum", 6, 128, (x, out, 300), defines={"BLOCK": 128})
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5, atol=1e-5)
    y = np.zeros_like(x)
    simt.launch(ROW_SOFTMAX, "row_softmax", 6, 64, (x, y, 300), defines={"BLOCK": 64})
    ref = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_padded_transpose_tile_clean():
    x = np.arange(1024, dtype=np.float32)
    for pad in (0, 1):
        y = np.zeros(1024, np.float32)
        simt.launch(BANK, "transpose_tile", 1, (32, 32), (x, y), defines={"PAD": pad})
        assert (y.reshape(32, 32) == x.reshape(32, 32).T).all()


def test_atomic_add_returns_old_values_in_thread_order():
    src = r"""
__global__ void k(int* counter, int* slot, float* acc) {
    slot[blockIdx.x * blockDim.x + threadIdx.x] = atomicAdd(counter, 1);
    __shared__ int local;
    if (threadIdx.x == 0) local = 0;
    __syncthreads();
    atomicAdd(&local, 2);
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(acc, (float)local);
}"""
    counter = np.array([5], np.int32)
    slot = np.zeros(128, np.int32)
    acc = np.zeros(1, np.float32)
    simt.launch(src, "k", 2, 64, (counter, slot, acc))
    assert counter[0] == 5 + 128
    assert slot.tolist() == list(range(5, 133))
    assert acc[0] == 2 * 64 * 2


def test_shuffle_with_partial_mask_is_an_error():
    src = r"""
__global__ void k(float* o) {
    float v = threadIdx.x;
    if (threadIdx.x < 16) v += __shfl_down_sync(0xffffffff, v, 8);
    o[threadIdx.x] = v;
}"""
    with pytest.raises(simt.WarpSyncError, match="0xffffffff"):
        simt.launch(src, "k", 1, 32, (np.zeros(32, np.float32),))
    # 源线程不在 mask 中（没有执行这条指令）：结果未定义，同样报错
    with pytest.raises(simt.WarpSyncError, match="source lane"):
        simt.launch(src.replace("0xffffffff", "0x0000ffff"), "k", 1, 32, (np.zeros(32, np.float32),))
    # width=16：线程 8..15 的源线程超出自己的段，拿回自己的值
    ok = src.replace("0xffffffff, v, 8)", "0x0000ffff, v, 8, 16)")
    o = np.zeros(32, np.float32)
    simt.launch(ok, "k", 1, 32, (o,))
    assert o.tolist() == [2 * t + 8 if t < 8 else (2 * t if t < 16 else t) for t in range(32)]


def test_shfl_xor_butterfly():
    src = r"""
__global__ void k(const float* x, float* o) {
    float v = x[threadIdx.x];
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffff, v, m);
    o[threadIdx.x] = v;
}"""
    x = np.arange(64, dtype=np.float32)
    o = np.zeros(64, np.float32)
    simt.launch(src, "k", 1, 64, (x, o))
    assert o.tolist() == [x[:32].sum()] * 32 + [x[32:].sum()] * 32


def test_all_threads_writing_one_shared_word_is_waw():
    src = r"""
__global__ void k(float* out) {
    __shared__ float total;
    total = threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = total;
}"""
    with pytest.raises(simt.SharedMemoryRaceError, match="WAW"):
        simt.launch(src, "k", 1, 64, (np.zeros(64, np.float32),))
    # 只让一个线程写：没有竞争
    rep = simt.launch(src.replace("    total = threadIdx.x;", "    if (threadIdx.x == 5) total = threadIdx.x;"),
                      "k", 1, 64, (out := np.zeros(64, np.float32),))
    assert (out == 5).all() and rep.shared_load_requests == 2


def test_float_atomics_are_sequential_in_thread_order():
    src = r"""
__global__ void k(float* acc, float* old, const float* v, int bins) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    old[t] = atomicAdd(&acc[t % bins], v[t]);
}"""
    rng = np.random.default_rng(3)
    n, bins = 512, 5
    v = rng.standard_normal(n).astype(np.float32)
    acc = np.zeros(bins, np.float32)
    old = np.zeros(n, np.float32)
    simt.launch(src, "k", 4, 128, (acc, old, v, bins))
    ref = np.zeros(bins, np.float32)
    ref_old = np.zeros(n, np.float32)
    for t in range(n):  # 逐个线程顺序相加
        ref_old[t] = ref[t % bins]
        ref[t % bins] = np.float32(ref[t % bins] + v[t])
    assert acc.tobytes() == ref.tobytes() and old.tobytes() == ref_old.tobytes()


def test_course_cuda_sources_parse():
    """课程的 .cu 文件全部在支持的子集内（逐个列出内核与参数表）。"""
    import pathlib
    import reduction_lab
    folder = pathlib.Path(reduction_lab.__file__).parent / "cuda_kernels"
    files = sorted(folder.glob("*.cu"))
    if not files:
        pytest.skip("cuda_kernels/ 里还没有 .cu 文件")
    for f in files:
        # CUB：模拟器用自带的同接口子集（prelude/cub/reduce.cuh）运行它
        if f.name == "primitives_cub.cu":
            prog = simt.parse(f)
            assert {"seg_sum_cub_warp", "seg_sum_cub_block", "seg_sum_cub_raking"} <= set(prog.kernels)
            continue
        # softmax_cluster.cu：第一版（softmax_cluster_rows）在模拟器里运行；其余内核用内联 PTX，
        # 启动前就被拒绝（给出文件与行）
        if f.name == "softmax_cluster.cu":
            prog = simt.parse(f)
            assert "softmax_cluster_rows" in prog.kernels
            prog.kernel("softmax_cluster_rows")
            for name in set(prog.kernels) - {"softmax_cluster_rows"}:
                with pytest.raises(simt.UnsupportedError, match=r"softmax_cluster\.cu.* 第 \d+ 行"):
                    prog.kernel(name)
            continue
        prog = simt.parse(f)
        assert prog.kernels, f
        for name in prog.kernels:
            sig = simt.kernel_signature(f, name)
            assert all(isinstance(p, tuple) and len(p) == 3 for p in sig)


def test_shared_atomics_race_with_plain_accesses_only():
    src = r"""
__global__ void k(int* out) {
    __shared__ int count;
    if (threadIdx.x == 0) count = 0;
    BARRIER
    atomicAdd(&count, 1);
    __syncthreads();
    out[threadIdx.x] = count;
}"""
    out = np.zeros(64, np.int32)
    rep = simt.launch(src.replace("BARRIER", "__syncthreads();"), "k", 1, 64, (out,))
    assert (out == 64).all() and rep.atomic_ops == 64
    # 清零与原子加之间少了屏障：线程 32 的原子加可能发生在线程 0 清零之前
    with pytest.raises(simt.SharedMemoryRaceError, match="line 6"):
        simt.launch(src.replace("BARRIER", ""), "k", 1, 64, (out,))
    # 原子加之后不经屏障就读：也是竞争
    with pytest.raises(simt.SharedMemoryRaceError, match="RAW.*atomic"):
        simt.launch(src.replace("BARRIER", "__syncthreads();").replace(
            "    __syncthreads();\n    out", "    out"), "k", 1, 64, (out,))
