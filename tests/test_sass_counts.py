"""The SASS counter reads cuobjdump's listing format: functions, predicated instructions, modifiers, NOPs."""

from flashsim.experiments.sass_counts import parse

LISTING = """
        code for sm_90a
                Function : flashsim_v2_fwd
        .headerflags    @"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                     /* 0x00000a00ff017b82 */
        /*0010*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;      /* 0x0000000c0804723c */
        /*0020*/              @!P0 FFMA R2, R3, R4, R5 ;                      /* 0x0000000403028223 */
        /*0030*/                   MUFU.EX2 R6, R6 ;                          /* 0x0000000600067308 */
        /*0040*/                   MUFU.EX2 R7, R7 ;                          /* 0x0000000700077308 */
        /*0050*/                   NOP ;                                      /* 0x0000000000007918 */
                Function : flashsim_v3_fwd
        /*0000*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*0010*/               @P1 BAR.SYNC.DEFER_BLOCKING 0x1, 0x100 ;
"""


def test_parse_counts_classes_and_opcodes_per_kernel():
    counts = parse(LISTING)
    assert set(counts) == {"flashsim_v2_fwd", "flashsim_v3_fwd"}
    v2 = counts["flashsim_v2_fwd"]
    assert v2["opcodes"] == {"LDC": 1, "HMMA": 1, "FFMA": 1, "MUFU": 2}
    assert v2["classes"] == {"other": 1, "hmma": 1, "fp32": 1, "mufu": 2}
    assert counts["flashsim_v3_fwd"]["classes"] == {"hgmma": 1, "barrier": 1}
