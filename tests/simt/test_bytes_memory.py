"""按字节寻址的内存：跨元素大小的指针转换、成员大小不同的结构体、指针存进内存、memcpy 任意字节数、
对齐检查，以及竞争检查与计数器按字节计。"""

from __future__ import annotations

import numpy as np
import pytest

from reduction_lab import simt
from reduction_lab.simt import constructs as C


@pytest.mark.parametrize("name", ["mixed_struct_memory", "byte_pointer_cast", "void_pointer", "pointer_variables"])
def test_registry_entries_run_exactly(name):
    r = C.check(C.by_name(name))
    assert r.status == "ran", r.message


def test_local_char_buffer_read_as_words_little_endian():
    src = r"""
__global__ void k(unsigned int* o) {
    unsigned char b[8];
    for (int j = 0; j < 8; j++) b[j] = (unsigned char)(16 * threadIdx.x + j);
    o[threadIdx.x] = ((unsigned int*)b)[1];
}"""
    o = np.zeros(4, np.uint32)
    simt.launch(src, "k", 1, 4, [o])
    want = (16 * np.arange(4)[:, None] + np.arange(4, 8)).astype(np.uint8).view(np.uint32).reshape(-1)
    assert np.array_equal(o, want)


def test_struct_with_pointer_member_in_shared_memory_round_trips():
    src = r"""
struct Node { int* data; int n; };
__global__ void k(int* x, int* o) {
    __shared__ Node s;
    if (threadIdx.x == 0) { s.data = x + 2; s.n = 5; }
    __syncthreads();
    o[threadIdx.x] = s.data[threadIdx.x] + s.n;
}"""
    x, o = np.arange(40, dtype=np.int32), np.zeros(32, np.int32)
    simt.launch(src, "k", 1, 32, [x, o])
    assert np.array_equal(o, x[2:34] + 5)


def test_memcpy_of_odd_byte_count_between_sizes():
    src = r"""
__global__ void k(const int* src, unsigned char* dst) {
    memcpy(dst + 1, src, 5);
}"""
    s, d = np.array([0x04030201, 0x08070605], np.int32), np.zeros(8, np.uint8)
    simt.launch(src, "k", 1, 1, [s, d])
    assert d.tolist() == [0, 1, 2, 3, 4, 5, 0, 0]


def test_misaligned_access_is_reported_with_its_line():
    src = "__global__ void k(unsigned char* b, int* o) {\n  int* p = (int*)(b + 1);\n  o[0] = *p;\n}\n"
    with pytest.raises(simt.SimtError, match="misaligned") as e:
        simt.launch(src, "k", 1, 1, [np.zeros(8, np.uint8), np.zeros(1, np.int32)])
    assert e.value.line == 3


def test_race_through_a_byte_alias_is_caught():
    # 线程 0 按字写共享数组，线程 1 通过 char* 写同一个字的一个字节：写后写
    src = r"""
__global__ void k(int* o) {
    __shared__ int w[4];
    if (threadIdx.x == 0) w[0] = 1;
    if (threadIdx.x == 1) ((char*)w)[2] = 7;
    __syncthreads();
    o[threadIdx.x] = w[0];
}"""
    with pytest.raises(simt.SharedMemoryRaceError) as e:
        simt.launch(src, "k", 1, 2, [np.zeros(2, np.int32)])
    assert e.value.line == 5


def test_char_per_lane_load_counts_one_request_and_one_sector():
    src = "__global__ void k(const unsigned char* b, int* o) { o[threadIdx.x] = b[threadIdx.x]; }"
    b = np.arange(32, dtype=np.uint8)
    r = simt.launch(src, "k", 1, 32, [b, np.zeros(32, np.int32)])
    assert (r.global_load_requests, r.global_load_bytes, r.global_load_sectors) == (1, 32, 1)


def test_mixed_struct_load_counts_each_member():
    src = r"""
struct R { unsigned char a; short b; int c; };
__global__ void k(const R* r, int* o) { R v = r[threadIdx.x]; o[threadIdx.x] = v.a + v.b + v.c; }"""
    rec = np.dtype({"names": ["a", "b", "c"], "formats": [np.uint8, np.int16, np.int32], "offsets": [0, 2, 4],
                    "itemsize": 8})
    r = np.zeros(32, rec)
    r["a"], r["b"], r["c"] = np.arange(32), -np.arange(32), 1000
    o = np.zeros(32, np.int32)
    rep = simt.launch(src, "k", 1, 32, [r.view(np.uint8), o])
    assert (o == 1000).all()
    # 三个成员各一条读：1 + 2 + 4 字节 x 32 个线程；32 个 8 字节的结构体占 8 个扇区，每条读都碰到这 8 个
    assert rep.global_load_requests == 3
    assert rep.global_load_bytes == 32 * 7
    assert rep.global_load_sectors == 3 * 8
