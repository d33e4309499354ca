// 声明都在 cuda_prelude.h 里（模拟器总是先包含它）
