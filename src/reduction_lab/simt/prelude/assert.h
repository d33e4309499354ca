// assert(e)：在设备代码里按线程检查（失败时报告行与线程，像 GPU 上的 device-side assert）；定义 NDEBUG 时为空
#undef assert
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
#define assert(e) __simt_c_assert(e)
#endif
