/*
 * standin_libcuda.c — an empty libcuda.so.1 for the contract build: the CUDA
 * backend only checks that the driver library loads (cuda_device.c); every
 * runtime call goes to standin_cudart.c. STANDIN_NO_DRIVER is handled by not
 * putting this library on the module's run path (see meson.build).
 */
__attribute__((visibility("default"))) int standin_libcuda_present(void) { return 1; }
