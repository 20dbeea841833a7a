// Phase stamps for experiments (experiments/phase_stamps.py, phase_stamps_v3.py build the kernels with
// FLASHSIM_PHASE_STAMPS): one recorder writes clock64 into a slot of its 16; stamp 0 (entry) also notes
// %globaltimer in slot 14 and the SM in slot 15. Without the macro this header defines nothing.
#pragma once

#ifdef FLASHSIM_PHASE_STAMPS
__device__ __forceinline__ void flashsim_phase_stamp(unsigned long long* slots, int k) {
  slots[k] = clock64();
  if (k == 0) {
    unsigned long long ns;
    unsigned sm;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    slots[14] = ns;
    slots[15] = sm;
  }
}
#endif
