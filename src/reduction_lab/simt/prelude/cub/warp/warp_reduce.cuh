// 模拟器自带的 CUB 子集（见 cub/reduce.cuh）
#pragma once
#include <cub/reduce.cuh>
