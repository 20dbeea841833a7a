"""The hardware profile: one frozen dataclass, one typed attribute per parameter, validated on construction.

The TOML files are the only registry of hardware numbers; this module only says which keys exist, their
types, the feature a key belongs to, and which combinations make sense. Every way of building a Profile
(loader, dataclasses.replace, with_overrides) goes through __post_init__, so an invalid one never exists.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from flashsim.errors import ProfileError

PACKAGE_DIR = Path(__file__).resolve().parent
ARCHES = {"ampere": 8, "hopper": 9}  # arch -> compute capability major
FEATURES = ("mma_sync", "cp_async", "tma", "wgmma", "fp8", "setmaxnreg", "named_barriers")
SOURCE_KINDS = ("datasheet", "paper", "measured", "derived", "assumed")
# How far a profile's numbers can be trusted, from its sources: measured on that GPU; SM-level numbers taken
# from a sibling GPU's measurements (same SM, its own memory system); or datasheets, papers and guesses only.
PROVENANCES = {
    "calibrated": "measured on this GPU",
    "derived": "SM-level numbers from a sibling GPU's measurements",
    "datasheet-only": "datasheet, paper and assumed numbers; nothing measured",
}
OVERRIDE_KIND = "override"
WARP = 32
# Keys for which zero is a meaningful value (a what-if without the per-block reservation).
ZERO_ALLOWED = frozenset({"smem_reserved_per_block_bytes", "issue_model", "clock_model", "fill_model",
                           "wgmma_ss_pipe_steal_fraction", "wgmma_rs_pipe_steal_fraction",
                           "mma_sync_ldsm_unhidden_fraction", "smem_fill_port_fraction",
                           "mma_sync_pipe_steal_fraction", "mma_sync_ldsm_latency_cycles", "ldsm_model",
                           "ldsm_data_latency_cycles", "xwarp_model",
                           "block_share_model", "store_path_model", "block_setup_model",
                           "icache_miss_cycles_per_line", "icache_branch_cycles", "icache_fetch_cycles_per_line",
                           "fetch_model"})

# Unit of a key, read from its name's suffix (longest suffixes first). No suffix: a plain count.
_UNIT_SUFFIXES = (
    ("_flops_per_clk_per_sm", "FLOP/clk/SM"),
    ("_ops_per_clk_per_sm", "op/clk/SM"),
    ("_bytes_per_clk_per_sm", "B/clk/SM"),
    ("_bytes_per_clk", "B/clk"),
    ("_bytes_per_s", "B/s"),
    ("_bytes", "B"),
    ("_hz", "Hz"),
    ("_cycles", "cycles"),
    ("_s", "s"),
)


def unit_of(key: str) -> str:
    return next((unit for suffix, unit in _UNIT_SUFFIXES if key.endswith(suffix)), "")


def _p(kind: type, feature: str | None = None) -> Any:
    """A parameter field: `kind` is int or float; a feature-tied key defaults to None (absent)."""
    meta = {"param": True, "kind": kind, "feature": feature}
    return field(default=None, metadata=meta) if feature else field(metadata=meta)


class ParamSpec(NamedTuple):
    name: str
    kind: type
    feature: str | None
    unit: str


@dataclass(frozen=True, kw_only=True)
class Profile:
    name: str
    description: str
    arch: str
    compute_capability: str
    features: frozenset[str]
    provenance: str = ""  # a key of PROVENANCES; empty: read from the sources (provenance_of)

    # SM organisation and occupancy limits
    sm_count: int = _p(int)
    sm_clock_hz: float = _p(float)  # the clock when no tensor core is busy (memory-bound kernels)
    # the clock that power management settles at while mma.sync keeps the tensor cores busy
    sm_clock_mma_sync_load_hz: float = _p(float)
    sub_partitions_per_sm: int = _p(int)
    max_threads_per_sm: int = _p(int)
    max_threads_per_block: int = _p(int)
    max_warps_per_sm: int = _p(int)
    max_blocks_per_sm: int = _p(int)
    registers_per_sm: int = _p(int)  # 32-bit registers
    registers_per_thread_max: int = _p(int)
    # shared memory
    smem_per_sm_bytes: int = _p(int)
    smem_per_block_max_bytes: int = _p(int)  # with the opt-in attribute
    smem_reserved_per_block_bytes: int = _p(int)  # taken by the system from the SM's pool per resident block
    smem_bandwidth_bytes_per_clk_per_sm: float = _p(float)
    smem_latency_cycles: int = _p(int)
    # L2 and HBM
    l2_bytes: int = _p(int)
    l2_line_bytes: int = _p(int)
    # The L2 runs in its own clock domain (Nsight Compute: 1.70-1.71 GHz on the H200 while the SM clock moves
    # between 1.68 and 1.97 GHz with the load), so its rates are fixed per second and become more bytes per SM
    # cycle when power management lowers the SM clock.
    l2_bandwidth_bytes_per_s: float = _p(float)  # aggregate over the chip
    l2_hit_latency_cycles: int = _p(int)
    l2_dirty_max_bytes: int = _p(int)  # dirty data L2 keeps before writing the oldest back to HBM
    l2_atomic_bytes_per_s: float = _p(float)  # fp32 reduce-adds the L2 slices perform (bytes added, chip)
    # an SM's stores straight from accumulator fragments (4 bytes a thread, 16 per row per warp instruction)
    # leave its warps' registers at this rate: a quarter of what coalesced 16-byte stores reach
    fragment_store_bytes_per_clk_per_sm: float = _p(float)
    # and the chip's L2 takes such partial-sector writes at this rate, shared by every SM storing so
    fragment_store_chip_bytes_per_s: float = _p(float)
    # store_path_model 1: the warps' plain (coalesced) stores leave an SM at most at store_bytes_per_clk_per_sm
    # and the chip's at store_chip_bytes_per_s, beside the L2 port they share with the loads; 0: the port alone
    store_path_model: int = _p(int)
    store_bytes_per_clk_per_sm: float = _p(float)
    store_chip_bytes_per_s: float = _p(float)
    hbm_bytes: int = _p(int)
    hbm_bandwidth_bytes_per_s: float = _p(float)  # achievable, not the datasheet's pin rate
    # the rate writes drain at amid reads (bus turnarounds): from a copy stream's time minus its reads' time
    hbm_write_bandwidth_bytes_per_s: float = _p(float)
    hbm_latency_cycles: int = _p(int)
    # the most HBM read bandwidth one requester (a thread block's warps; an SM's TMA engine) draws, however idle
    # the chip: what its outstanding requests carry per round trip
    hbm_requester_bandwidth_bytes_per_s: float = _p(float)
    # the share of hbm_bandwidth_bytes_per_s (the warps' own loads' rate) that a stream of TMA copies reads
    # from HBM, all SMs at once: each byte a TMA copy misses in the L2 takes 1 / this bytes of the HBM port
    hbm_tma_read_fraction: float = _p(float)
    # math
    fp32_flops_per_clk_per_sm: float = _p(float)
    # cycles between a warp's dependent FP32 instructions: a warp's serial softmax arithmetic issues at this pace
    fp32_dependent_issue_cycles: float = _p(float)
    # the most dependent-stream instructions one scheduler dispatches per cycle, summed over its warps: with
    # three or four warps each running a dependent chain, they take turns at this rate
    dependent_issue_per_clk_per_sub_partition: float = _p(float)
    mufu_ops_per_clk_per_sm: float = _p(float)
    # the instruction-issue model of elementwise ops (simulator/instructions.py): 1 uses it, 0 paces each op
    # as one dependent stream at fp32_dependent_issue_cycles per instruction (the model before it)
    issue_model: int = _p(int)
    warp_issue_per_clk_per_sub_partition: float = _p(float)  # warp instructions one scheduler dispatches
    alu_ops_per_clk_per_sm: float = _p(float)  # lanes of the ALU pipe: compare, min/max, select, 16-bit packing
    shfl_ops_per_clk_per_sm: float = _p(float)  # lanes of warp shuffles
    mufu_latency_cycles: float = _p(float)  # a dependent MUFU.EX2 chain's cycles per instruction
    # cycles between one warp's bookkeeping instructions in a stretch that has nothing else to issue beside them
    # (a kernel's prologue and epilogue: ir.Code.alone), waiting on their own fixed-latency dependencies; 1: every cycle
    bookkeeping_issue_cycles: float = _p(float)
    shfl_latency_cycles: float = _p(float)  # a dependent SHFL.BFLY chain's cycles per instruction
    mma_sync_fp16_flops_per_clk_per_sm: float = _p(float)
    mma_sync_bf16_flops_per_clk_per_sm: float = _p(float)
    mma_sync_tf32_flops_per_clk_per_sm: float = _p(float)
    mma_sync_latency_cycles: int = _p(int)
    # ldmatrix-fed mma.sync: the fraction of the shorter of a GEMM's loads alone and products alone that the
    # longer does not hide (each warp's products wait on its own loads; 0: the longer hides it all)
    mma_sync_ldsm_unhidden_fraction: float = _p(float)
    # the same loads by their latency: each k-step's products wait for its fragments, of which n warps per
    # sub-partition in GEMMs at once leave mma_sync_ldsm_latency_cycles / n^2 exposed
    mma_sync_ldsm_latency_cycles: float = _p(float)
    # 0: the unhidden fraction above; 1: the latency form; 2: the GEMM's instructions replayed
    # (simulator/gemm_replay.py; a modelling choice, docs/MODEL.md)
    ldsm_model: int = _p(int)
    # ldsm_model 2: cycles from an ldmatrix leaving the shared-memory port to its fragment being usable, and
    # the fragment loads the compiler keeps in front of the products that read them
    ldsm_data_latency_cycles: float = _p(float)
    ldsm_prefetch_loads: int = _p(int)
    # xwarp_model 1: an online softmax whose row statistics are combined across W warps through shared memory
    # (V1's) waits cross_warp_exchange_cycles + W x cross_warp_exchange_cycles_per_warp for the exchanges,
    # their barriers and the one-thread-per-row fold (kernels/microbench/xwarp.cu); 0: two shared-memory latencies
    xwarp_model: int = _p(int)
    cross_warp_exchange_cycles: float = _p(float)
    cross_warp_exchange_cycles_per_warp: float = _p(float)
    # 0: an SM's units serve every request at once, each at rate / n (processor sharing); 1: with k thread
    # blocks resident on the SM each block's warps take at most 1/k of each unit, whatever the others do
    # (a modelling choice, docs/MODEL.md: the two blocks of an SM cost the same at every phase apart)
    block_share_model: int = _p(int)
    # the issue model (issue_model = 1) beside ldmatrix-fed mma.sync: the scheduler cycles one HMMA takes from
    # its sub-partition's other warps, and the share of the FMA, ALU, MUFU and shuffle pipes a running
    # mma.sync GEMM takes from the other warps on its SM (both from kernels/microbench/softmax_gemm.cu)
    mma_sync_issue_cycles: float = _p(float)
    mma_sync_pipe_steal_fraction: float = _p(float)
    # of the bytes the copy engines (cp.async, TMA) write into shared memory, the share that takes the SM's
    # shared-memory read port from the warps' loads (the fills land through the banks' own write path)
    smem_fill_port_fraction: float = _p(float)
    # 0: every byte a copy engine writes into shared memory takes the port the loads read through; 1: only
    # smem_fill_port_fraction of them (a modelling choice, docs/MODEL.md "Shared-memory fills")
    fill_model: int = _p(int)
    # data movement and launch
    cp_async_issue_cycles: int = _p(int)
    launch_overhead_s: float = _p(float)
    cta_launch_cycles: int = _p(int)
    # block_setup_model 1: a warp-specialised block's producer runs its set-up before a tile's first copy
    # (ir.BlockSetup): barriers initialised and published (mbarrier_setup_cycles + mbarrier_init_cycles each),
    # setmaxnreg, the tile's parameters read from the constant bank (constant_cold_read_cycles per dependent
    # round on the block's first tile, constant_read_cycles after) and its index arithmetic (tile_index_cycles);
    # 0: the producer issues its first copy at once
    block_setup_model: int = _p(int)
    mbarrier_setup_cycles: float = _p(float)
    mbarrier_init_cycles: float = _p(float)
    setmaxnreg_cycles: float = _p(float)
    constant_cold_read_cycles: float = _p(float)
    constant_read_cycles: float = _p(float)
    tile_index_cycles: float = _p(float)
    # instruction fetch: the SASS an SM's instruction caches keep, and what each 128-byte line of code not kept
    # there adds to the time of the instructions on it (0: code is always there)
    icache_bytes_per_sm: int = _p(int)
    icache_miss_cycles_per_line: float = _p(float)
    # what a taken branch adds to its warp's time: the fetch redirected to its target (0: nothing)
    icache_branch_cycles: float = _p(float)
    # the SM's fetch of code it lacks, one 128-byte line after another (fetch_model 1)
    icache_fetch_cycles_per_line: float = _p(float)
    # 0: a stretch of code the SM lacks is fetched before its warps run it, icache_miss_cycles_per_line a line;
    # 1: it streams in through the SM's fetch (icache_fetch_cycles_per_line a line, stretches queued one after
    # another) while the warps run it, who wait at its end for what has not come (docs/MODEL.md)
    fetch_model: int = _p(int)
    # a launch's GPU busy time beyond its blocks' span: the kernel's start, the first dispatch, its end
    kernel_busy_overhead_s: float = _p(float)
    # GPU busy time of a small memset (a few bytes) that a library's call launches beside its kernels
    # (simulator/calls.py); no simulation reads it
    memset_busy_s: float = _p(float)
    # Hopper only
    wgmma_fp16_flops_per_clk_per_sm: float | None = _p(float, "wgmma")
    wgmma_bf16_flops_per_clk_per_sm: float | None = _p(float, "wgmma")
    wgmma_fp8_flops_per_clk_per_sm: float | None = _p(float, "wgmma")
    wgmma_tf32_flops_per_clk_per_sm: float | None = _p(float, "wgmma")
    wgmma_latency_cycles: int | None = _p(int, "wgmma")
    sm_clock_wgmma_load_hz: float | None = _p(float, "wgmma")  # the clock under sustained wgmma load
    # power management sets a wgmma kernel's clock by its tensor-core duty (busy share of the dtype's peak):
    # up to wgmma_clock_knee_fraction the clock of a light tensor load, then linearly down to the saturated
    # sm_clock_wgmma_load_hz at full duty (wgmma_clock_hz)
    sm_clock_light_tensor_load_hz: float | None = _p(float, "wgmma")
    wgmma_clock_knee_fraction: float | None = _p(float, "wgmma")
    # 1: wgmma kernels run at the clock of their duty; 0: at sm_clock_wgmma_load_hz (the shipped default)
    clock_model: int | None = _p(int, "wgmma")
    # the issue model's share of each elementwise pipe (issue, FMA, ALU, MUFU, shuffle) a running wgmma takes
    # from the other warps on its SM (its accumulators, and an RS product's A fragments, go through the
    # register file), for products with both operands in shared memory (SS) and with A in registers (RS)
    wgmma_ss_pipe_steal_fraction: float | None = _p(float, "wgmma")
    wgmma_rs_pipe_steal_fraction: float | None = _p(float, "wgmma")
    tma_issue_cycles: int | None = _p(int, "tma")
    tma_latency_cycles: int | None = _p(int, "tma")  # added to the L2/HBM latency of the bytes it moves

    path: str = ""
    based_on: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __reduce__(self):
        """Pickle by fields (the read-only sources view is not picklable), so profiles cross to worker
        processes; unpickling runs the same checks as any construction."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["sources"] = dict(self.sources)
        return (_profile_from_fields, (fields,))

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        self._check_metadata()
        for spec in PARAMS:
            self._check_param(spec)
        self._check_consistency()

    # -- validation -------------------------------------------------------------------------------------

    @property
    def origin(self) -> str:
        """What an error message names: the file (short form for shipped ones) or the profile's name."""
        return display_path(self.path) if self.path else f"profile {self.name!r}"

    def _fail(self, key: str, problem: str, *related: str) -> ProfileError:
        # Name the --set that introduced a bad value, whichever of the involved keys it was.
        via = [self.sources[k] for k in (key, *related) if self.sources.get(k, "").startswith(OVERRIDE_KIND)]
        suffix = f" ({'; '.join(via)})" if via else ""
        return ProfileError(f"{self.origin}: {key}{suffix}: {problem}")

    def _check_metadata(self) -> None:
        for key in ("name", "description", "arch", "compute_capability"):
            value = getattr(self, key)
            if not isinstance(value, str):
                raise self._fail(key, f"expected a string, got {_type_name(value)}")
        if not self.name.strip():
            raise self._fail("name", "must not be empty")
        if self.arch not in ARCHES:
            raise self._fail("arch", f"unknown arch {self.arch!r}; choose one of {', '.join(ARCHES)}")
        match = re.fullmatch(r"(\d+)\.(\d+)", self.compute_capability)
        if not match:
            raise self._fail(
                "compute_capability", f"expected 'major.minor' like \"9.0\", got {self.compute_capability!r}"
            )
        if int(match[1]) != ARCHES[self.arch]:
            raise self._fail(
                "compute_capability",
                f"{self.compute_capability} does not belong to arch {self.arch} (expected {ARCHES[self.arch]}.x)",
                "arch",
            )
        features = self.features
        if isinstance(features, str) or not isinstance(features, Iterable):
            raise self._fail("features", f"expected a list of feature names, got {_type_name(features)}")
        features = list(features)
        for flag in features:
            if flag not in FEATURES:
                hint = _did_you_mean(flag, FEATURES) if isinstance(flag, str) else ""
                raise self._fail("features", f"unknown feature {flag!r}{hint}; allowed: {', '.join(FEATURES)}")
        object.__setattr__(self, "features", frozenset(features))
        if "fp8" in self.features and "wgmma" not in self.features:
            raise self._fail("features", "fp8 requires wgmma (the only fp8 tensor instruction modelled)")
        if not self.provenance:
            object.__setattr__(self, "provenance", provenance_of(self.sources.values()))
        if self.provenance not in PROVENANCES:
            raise self._fail("provenance", f"unknown provenance {self.provenance!r}; choose one of "
                             f"{', '.join(PROVENANCES)}")  # fmt: skip

    def _check_param(self, spec: ParamSpec) -> None:
        value = getattr(self, spec.name)
        if spec.feature and spec.feature not in self.features:
            if value is not None:
                raise self._fail(spec.name, f"requires feature {spec.feature}, which the profile lacks", "features")
            return
        if value is None:
            needed = f"required with feature {spec.feature}" if spec.feature else "required"
            raise self._fail(spec.name, f"missing ({needed})", "features")
        try:
            value = coerce(spec.kind, value)
        except ValueError as exc:
            raise self._fail(spec.name, str(exc)) from None
        if value < 0 or (value == 0 and spec.name not in ZERO_ALLOWED):
            raise self._fail(spec.name, f"must be {'>= 0' if spec.name in ZERO_ALLOWED else 'positive'}, got {value}")
        object.__setattr__(self, spec.name, value)

    def _check_consistency(self) -> None:
        if self.issue_model not in (0, 1, 2):
            raise self._fail("issue_model", f"must be 0 (dependent stream), 1 (instruction issue) or 2 (instruction "
                                            f"issue for mma.sync kernels, the stream for wgmma ones), "
                                            f"got {self.issue_model}")
        if self.clock_model not in (None, 0, 1):
            raise self._fail("clock_model", f"must be 0 (the saturated clock) or 1 (the clock of the tensor duty), "
                                            f"got {self.clock_model}")
        for key in ("wgmma_ss_pipe_steal_fraction", "wgmma_rs_pipe_steal_fraction"):
            value = getattr(self, key)
            if value is not None and not 0 <= value < 1:
                raise self._fail(key, f"is a share of the elementwise pipes, at least 0 and below 1, got {value}")
        if self.wgmma_clock_knee_fraction is not None and not 0 < self.wgmma_clock_knee_fraction < 1:
            raise self._fail("wgmma_clock_knee_fraction", f"is a share of the tensor cores' peak, between 0 and 1, "
                                                          f"got {self.wgmma_clock_knee_fraction}")
        if self.block_share_model not in (0, 1):
            raise self._fail("block_share_model", f"must be 0 (processor sharing) or 1 (a share per resident block), "
                                                  f"got {self.block_share_model}")
        if self.ldsm_model not in (0, 1, 2):
            raise self._fail("ldsm_model", f"must be 0 (the unhidden fraction), 1 (the loads' latency) or 2 (the "
                                           f"GEMM's instructions replayed), got {self.ldsm_model}")
        if self.ldsm_prefetch_loads < 1:
            raise self._fail("ldsm_prefetch_loads", f"counts the loads kept in front of the products, at least 1, "
                                                    f"got {self.ldsm_prefetch_loads}")
        if not 0 <= self.mma_sync_pipe_steal_fraction < 1:
            raise self._fail("mma_sync_pipe_steal_fraction", f"is a share of the elementwise pipes, at least 0 and "
                                                             f"below 1, got {self.mma_sync_pipe_steal_fraction}")
        if self.mma_sync_issue_cycles < 1:
            raise self._fail("mma_sync_issue_cycles", f"is the scheduler cycles of one HMMA, at least 1, got "
                                                      f"{self.mma_sync_issue_cycles}")
        if self.mma_sync_ldsm_unhidden_fraction > 1:
            raise self._fail("mma_sync_ldsm_unhidden_fraction", f"is a fraction of the shorter of the loads and "
                                                                f"products, at most 1, got "
                                                                f"{self.mma_sync_ldsm_unhidden_fraction}")
        if self.fetch_model not in (0, 1, 2):
            raise self._fail("fetch_model", f"must be 0 (a stretch fetched before it runs), 1 (streamed in while "
                                            f"it runs) or 2 (fetched where the warps reach it), got "
                                            f"{self.fetch_model}")
        if self.store_path_model not in (0, 1):
            raise self._fail("store_path_model", f"must be 0 (stores take the L2 port alone) or 1 (and the SM's and "
                                                 f"the chip's store paths), got {self.store_path_model}")
        if not 0 < self.hbm_tma_read_fraction <= 1:
            raise self._fail("hbm_tma_read_fraction", f"is a share of the HBM's read rate, in (0, 1], got "
                                                      f"{self.hbm_tma_read_fraction}")
        if self.block_setup_model not in (0, 1):
            raise self._fail("block_setup_model", f"must be 0 (a producer copies at once) or 1 (after its set-up), "
                                                  f"got {self.block_setup_model}")
        if self.bookkeeping_issue_cycles < 1:
            raise self._fail("bookkeeping_issue_cycles", f"is the cycles between one warp's instructions, at least 1, "
                                                         f"got {self.bookkeeping_issue_cycles}")
        if self.fill_model not in (0, 1):
            raise self._fail("fill_model", f"must be 0 (fills take the whole port) or 1 (smem_fill_port_fraction of "
                                           f"it), got {self.fill_model}")
        if not 0 <= self.smem_fill_port_fraction <= 1:
            raise self._fail("smem_fill_port_fraction", f"is a share of the fills' bytes, between 0 and 1, got "
                                                        f"{self.smem_fill_port_fraction}")
        if self.max_warps_per_sm * WARP != self.max_threads_per_sm:
            raise self._fail(
                "max_threads_per_sm",
                f"{self.max_threads_per_sm} != 32 x max_warps_per_sm ({self.max_warps_per_sm})",
                "max_warps_per_sm",
            )
        if self.max_threads_per_block % WARP:
            raise self._fail("max_threads_per_block", f"{self.max_threads_per_block} is not a multiple of 32")
        if self.max_threads_per_block > self.max_threads_per_sm:
            raise self._fail(
                "max_threads_per_block",
                f"{self.max_threads_per_block} exceeds max_threads_per_sm ({self.max_threads_per_sm})",
                "max_threads_per_sm",
            )
        if self.max_warps_per_sm % self.sub_partitions_per_sm:
            raise self._fail(
                "sub_partitions_per_sm",
                f"max_warps_per_sm ({self.max_warps_per_sm}) is not a multiple of {self.sub_partitions_per_sm}",
                "max_warps_per_sm",
            )
        if self.registers_per_thread_max * WARP > self.registers_per_sm:
            raise self._fail(
                "registers_per_thread_max",
                f"one warp at {self.registers_per_thread_max} registers exceeds registers_per_sm "
                f"({self.registers_per_sm})",
                "registers_per_sm",
            )
        if self.smem_per_block_max_bytes > self.smem_per_sm_bytes:
            raise self._fail(
                "smem_per_block_max_bytes",
                f"{self.smem_per_block_max_bytes} exceeds smem_per_sm_bytes ({self.smem_per_sm_bytes})",
                "smem_per_sm_bytes",
            )
        if self.smem_per_block_max_bytes + self.smem_reserved_per_block_bytes > self.smem_per_sm_bytes:
            raise self._fail(
                "smem_per_block_max_bytes",
                f"{self.smem_per_block_max_bytes} plus smem_reserved_per_block_bytes "
                f"({self.smem_reserved_per_block_bytes}) exceeds smem_per_sm_bytes ({self.smem_per_sm_bytes})",
                "smem_reserved_per_block_bytes",
                "smem_per_sm_bytes",
            )
        line = self.l2_line_bytes
        if line & (line - 1):
            raise self._fail("l2_line_bytes", f"{line} is not a power of two")
        if self.l2_bytes % line:
            raise self._fail(
                "l2_bytes", f"{self.l2_bytes} is not a multiple of l2_line_bytes ({line})", "l2_line_bytes"
            )
        if self.l2_bytes >= self.hbm_bytes:
            raise self._fail(
                "l2_bytes", f"{self.l2_bytes} is not smaller than hbm_bytes ({self.hbm_bytes})", "hbm_bytes"
            )
        if not self.smem_latency_cycles < self.l2_hit_latency_cycles < self.hbm_latency_cycles:
            raise self._fail(
                "l2_hit_latency_cycles",
                f"latencies must grow down the hierarchy: smem {self.smem_latency_cycles} < "
                f"l2 {self.l2_hit_latency_cycles} < hbm {self.hbm_latency_cycles} cycles",
                "smem_latency_cycles",
                "hbm_latency_cycles",
            )

    # -- access -----------------------------------------------------------------------------------------

    def occupancy_limits(self, threads: int, regs_per_thread: int, smem_bytes: int) -> dict[str, int]:
        """Thread blocks of this shape one SM of this profile holds at once, per limiting resource."""
        return occupancy_limits(threads, regs_per_thread, smem_bytes, max_blocks=self.max_blocks_per_sm,
                                max_threads=self.max_threads_per_sm, registers=self.registers_per_sm,
                                smem=self.smem_per_sm_bytes, smem_reserved=self.smem_reserved_per_block_bytes)

    def has(self, feature: str) -> bool:
        if feature not in FEATURES:
            raise ProfileError(f"unknown feature {feature!r}{_did_you_mean(feature, FEATURES)}")
        return feature in self.features

    @property
    def params(self) -> dict[str, int | float]:
        """The parameters this profile has (feature-tied ones only with their feature), in declared order."""
        return {s.name: getattr(self, s.name) for s in PARAMS if getattr(self, s.name) is not None}

    def source(self, key: str) -> str:
        spec = PARAM_SPECS.get(key)
        if spec is None:
            raise ProfileError(f"{self.origin}: unknown parameter {key!r}{_did_you_mean(key, PARAM_SPECS)}")
        if getattr(self, key) is None:
            raise ProfileError(f"{self.origin}: {key}: not set (requires feature {spec.feature})")
        return self.sources.get(key, "unspecified")

    def with_overrides(self, overrides: Mapping[str, Any] | Iterable[str] | None) -> Profile:
        """A copy with `--set key=value` overrides applied and validated like the file; sources record them."""
        items = parse_overrides(overrides, self.origin)
        if not items:
            return self
        changes: dict[str, Any] = {}
        sources = dict(self.sources)
        features = None
        for key, raw, text in items:
            if key == "features":
                features = self._edit_features(features or self.features, raw, text)
                sources["features"] = f"{OVERRIDE_KIND}: --set {text}"  # so errors name the edit
                continue
            spec = PARAM_SPECS.get(key)
            if spec is None:
                what = "metadata and cannot be overridden" if key in _METADATA else "not a parameter"
                hint = _did_you_mean(key, PARAM_SPECS) if key not in _METADATA else ""
                raise ProfileError(f"{self.origin}: --set {text}: {key!r} is {what}{hint}")
            changes[key] = parse_value(spec, raw, f"{self.origin}: --set {text}")
            sources[key] = f"{OVERRIDE_KIND}: --set {text}"
        if features is not None:
            changes["features"] = features
            # Keys of a dropped feature go with it, unless set explicitly (then validation complains).
            for spec in PARAMS:
                if spec.feature and spec.feature not in features and spec.name not in changes:
                    changes[spec.name] = None
                    sources.pop(spec.name, None)
        return dataclasses.replace(self, **changes, sources=sources)

    def _edit_features(self, current: frozenset[str], raw: Any, text: str) -> frozenset[str]:
        """`features=+tma,-wgmma` adds and removes; `features=mma_sync,cp_async` replaces the set."""
        items = [s.strip() for s in str(raw).split(",") if s.strip()]
        signed = [s[0] in "+-" for s in items]
        if not items or (any(signed) and not all(signed)):
            raise ProfileError(
                f"{self.origin}: --set {text}: write features=+a,-b to edit the set or features=a,b to replace it"
            )
        if not any(signed):
            return frozenset(items)
        result = set(current)
        for item in items:
            (result.add if item[0] == "+" else result.discard)(item[1:])
        return frozenset(result)

    def as_dict(self) -> dict[str, Any]:
        """Metadata, every parameter with its unit and source, and the derived values; JSON-able."""
        return {
            "name": self.name,
            "description": self.description,
            "arch": self.arch,
            "compute_capability": self.compute_capability,
            "features": sorted(self.features),
            "provenance": self.provenance,
            "based_on": self.based_on,
            "path": self.path,
            "params": {
                k: {"value": v, "unit": unit_of(k), "source": self.sources.get(k, "unspecified")}
                for k, v in self.params.items()
            },
            "derived": self.derived(),
        }

    # -- derived ----------------------------------------------------------------------------------------

    @property
    def hbm_bytes_per_clk(self) -> float:
        """Achievable HBM bytes per SM clock, for the whole chip."""
        return self.hbm_bandwidth_bytes_per_s / self.sm_clock_hz

    @property
    def best_tensor_instr(self) -> str:
        return "wgmma" if "wgmma" in self.features else "mma_sync"

    def clock_hz(self, instr: str | None) -> float:
        """The SM clock while a kernel keeps `instr` ('mma_sync', 'wgmma' or None: no tensor work) busy."""
        if instr == "wgmma" and self.sm_clock_wgmma_load_hz:
            return self.sm_clock_wgmma_load_hz
        if instr == "mma_sync":
            return self.sm_clock_mma_sync_load_hz
        return self.sm_clock_hz

    def wgmma_clock_hz(self, duty: float) -> float:
        """The SM clock of a wgmma kernel whose tensor cores are busy `duty` of its cycles (0..1)."""
        sat, light = self.sm_clock_wgmma_load_hz, self.sm_clock_light_tensor_load_hz
        knee = self.wgmma_clock_knee_fraction
        if light is None or knee is None:
            return sat
        over = min(1.0, max(0.0, duty)) - knee
        return light if over <= 0 else light + (sat - light) * over / (1.0 - knee)

    def tensor_flops_per_clk_per_sm(self, instr: str, dtype: str) -> float:
        """Tensor-core FLOP/clk/SM of `instr` ("mma_sync" | "wgmma") on `dtype` (fp16, bf16, fp8; fp32 = tf32)."""
        if instr not in ("mma_sync", "wgmma"):
            raise ProfileError(f"unknown tensor instruction {instr!r}; choose mma_sync or wgmma")
        if dtype not in ("fp16", "bf16", "fp8", "fp32", "tf32"):
            raise ProfileError(f"unknown tensor dtype {dtype!r}; choose fp16, bf16, fp8 or fp32 (tf32)")
        if instr not in self.features:
            raise ProfileError(f"{self.name} lacks feature {instr}, so it has no {instr} {dtype} rate")
        if dtype == "fp8":
            if instr == "mma_sync":
                raise ProfileError(f"{self.name}: mma_sync has no fp8 rate (fp8 tensor math needs wgmma)")
            if "fp8" not in self.features:
                raise ProfileError(f"{self.name} lacks feature fp8, so it has no wgmma fp8 rate")
        key = f"{instr}_{'tf32' if dtype == 'fp32' else dtype}_flops_per_clk_per_sm"
        return getattr(self, key)

    def tensor_peak_flops_per_s(self, dtype: str = "bf16", instr: str | None = None) -> float:
        """Chip-wide tensor peak at the clock the chip holds under that load; `instr` defaults to the best the
        profile has."""
        instr = instr or self.best_tensor_instr
        return self.tensor_flops_per_clk_per_sm(instr, dtype) * self.sm_count * self.clock_hz(instr)

    def derived(self) -> dict[str, float]:
        out = {"hbm_bytes_per_clk": self.hbm_bytes_per_clk}
        for instr in ("mma_sync", "wgmma"):
            for dtype in ("fp16", "bf16", "fp8", "fp32"):
                if instr in self.features and (dtype != "fp8" or (instr == "wgmma" and "fp8" in self.features)):
                    out[f"{instr}_{dtype}_peak_flops_per_s"] = self.tensor_peak_flops_per_s(dtype, instr)
        return out


PARAMS: tuple[ParamSpec, ...] = tuple(
    ParamSpec(f.name, f.metadata["kind"], f.metadata["feature"], unit_of(f.name))
    for f in dataclasses.fields(Profile)
    if f.metadata.get("param")
)
PARAM_SPECS: dict[str, ParamSpec] = {s.name: s for s in PARAMS}
_METADATA = ("name", "description", "arch", "compute_capability", "provenance", "aliases", "based_on", "path")


def provenance_of(sources: Iterable[str]) -> str:
    """The provenance the sources show: derived if any number is derived from a sibling's measurement,
    else calibrated if any is measured, else datasheet-only."""
    kinds = {str(s).partition(":")[0].strip() for s in sources}
    if "derived" in kinds:
        return "derived"
    return "calibrated" if "measured" in kinds else "datasheet-only"


def describe_provenance(provenance: str) -> str:
    """'derived (SM-level numbers from a sibling GPU's measurements)'."""
    return f"{provenance} ({PROVENANCES[provenance]})"


def coerce(kind: type, value: Any) -> int | float:
    """`value` as `kind`; an int key takes an integral float (2.5e5), bool is not a number."""
    wanted = "an integer" if kind is int else "a number"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected {wanted}, got {_type_name(value)} {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value}")
    if kind is int:
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"expected an integer, got {value}")
            value = int(value)
        return value
    return float(value)


def parse_value(spec: ParamSpec, raw: Any, where: str) -> int | float:
    """An override's text as the key's type ("233472", "2.5e5", "1.83e9"); numbers pass through."""
    if not isinstance(raw, str):
        return raw  # validated by Profile like any value
    text = raw.strip()
    try:
        return int(text, 10) if spec.kind is int else float(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        wanted = "an integer" if spec.kind is int else "a number"
        raise ProfileError(f"{where}: {spec.name} expects {wanted}, got {raw!r}") from None
    if not (math.isfinite(value) and value.is_integer()):
        raise ProfileError(f"{where}: {spec.name} expects an integer, got {raw!r}")
    return int(value)


def parse_overrides(overrides: Mapping[str, Any] | Iterable[str] | None, origin: str) -> list[tuple[str, Any, str]]:
    """(key, raw value, original text) for a {key: value} mapping or ["key=value", ...]."""
    if not overrides:
        return []
    if isinstance(overrides, Mapping):
        return [(str(k).strip(), v, f"{k}={v}") for k, v in overrides.items()]
    if isinstance(overrides, str):
        overrides = [overrides]
    items = []
    for text in overrides:
        key, sep, raw = str(text).partition("=")
        if not sep or not key.strip():
            raise ProfileError(f"{origin}: --set expects KEY=VALUE, got {text!r}")
        items.append((key.strip(), raw.strip(), f"{key.strip()}={raw.strip()}"))
    return items


def display_path(path: str | os.PathLike) -> str:
    """A shipped profile as hw_profiles/<file>; a user's file relative to the working directory if inside it."""
    p = Path(path)
    if p.parent == PACKAGE_DIR:
        return f"hw_profiles/{p.name}"
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _type_name(value: Any) -> str:
    names = {bool: "boolean", str: "string", int: "integer", float: "float", list: "array", dict: "table"}
    return names.get(type(value), type(value).__name__)


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def occupancy_limits(threads: int, regs_per_thread: int, smem_bytes: int, *, max_blocks: int, max_threads: int,
                     registers: int, smem: int, smem_reserved: int) -> dict[str, int]:
    """Thread blocks of this shape an SM with these resources holds at once, per limiting resource."""
    limits = {
        "blocks": max_blocks,
        "threads": max_threads // threads,
        "registers": registers // max(1, regs_per_thread * threads),
    }
    if smem_bytes:
        limits["shared memory"] = smem // (smem_bytes + smem_reserved)
    return limits


def _profile_from_fields(fields: dict) -> Profile:
    return Profile(**fields)
