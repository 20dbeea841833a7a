"""simulate(): profile x problem x algorithm (+ tiling) -> predicted time, bytes per level, what bounds it."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

from flashsim.algorithms import catalog
from flashsim.algorithms.backward import pass_of
from flashsim.algorithms.parts import gemm_dtype
from flashsim.algorithms.problem import Problem
from flashsim.algorithms.schedules import build
from flashsim.algorithms.tiling import Tiling, check_fits, resolve_tiling
from flashsim.errors import FlashsimError

from .gpu import Gpu, blocks_per_sm
from .limits import MAX_SIMULATED_STEPS, check_memory, check_work
from .replay import chip_cycles
from .sampling import head_sample, sample_info

# SMs simulated in the default (sampled) mode; `sms=None` or the chip's count gives the whole-chip run.
DEFAULT_SAMPLE_SMS = 8
# Grids of at most this many waves of one block per SM run whole-chip: cheap, and sampling few blocks of
# unequal length (causal) would miss the tail.
SAMPLE_ABOVE_WAVES = 4
# ... unless their blocks are so long (V1's inner loop) that the whole chip would interpret more tile ops
# than this: then a sample runs, as for large grids (with as many waves as the chip, see head_sample).
WHOLE_CHIP_OPS = 400_000
# Grids of more waves than that but at most this many block steps (thread blocks x K/V steps each, half for
# causal) run whole-chip too: no sample is trusted to 2% there (the chip's waves in lockstep, a head's blocks dealt over
# more slots), and the whole chip costs 3-12 s of CPU (the FA2 grid's N=512 points and causal N=1024,
# experiments/results/sampling-exactness.json), what the largest samples cost.
WHOLE_CHIP_WORK = 128 * 128
# Equal blocks (not causal) run whole-chip up to this many times as many block steps. Their chip runs its waves in
# lockstep, and where its waves cut heads no sample has its rate of cut heads (a sample's waves are smaller, so
# they cut heads either never or more often): up to 4x that work, samples came up to 4.6% from --full (5 of the
# FA2 grid's 20 such points more than 2%), past it 0.9% at most; the whole chip costs 6-22 s of CPU there
# (the lent machine's cores), the samples 0.3-4 s.
LOCKSTEP_WORK_FACTOR = 4
# Below this utilisation of its busiest unit a run is called latency-bound.
LATENCY_BOUND_BELOW = 0.5

UNIT_NAMES = ("tensor", "sfu", "alu", "smem", "l2", "hbm")


def check_features(algo: str, problem: Problem, profile) -> None:
    """The record's hardware features (V3: TMA and wgmma) and dtypes: say what a profile or problem lacks."""
    catalog.check_features(algo, problem, profile)


@dataclass
class SimResult:
    algo: str
    hw: str
    problem: Problem
    tiling: Tiling
    cycles: int
    time_s: float
    bytes: dict
    utilization: dict
    bound_by: str
    roofline_time_s: float
    roofline: dict
    kernels: list = field(default_factory=list)
    kernel_time_s: float = 0.0  # time_s without the launch overheads
    sim: dict = field(default_factory=dict)
    pass_: str = "fwd"  # which pass's FLOPs the throughput counts: fwd, bwd (2.5x) or fwd+bwd
    hw_provenance: str = ""  # the profile's: calibrated, derived or datasheet-only (hw_profiles PROVENANCES)
    hbm_peak_bytes_per_s: float = 0.0  # the profile's HBM bandwidth
    # a variable-length batch: its thread blocks and FLOPs against the same batch padded to its longest sequence
    padding: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)  # build options switched from the record's defaults

    @property
    def tflops(self) -> float:
        return self.problem.flops(self.pass_) / self.time_s / 1e12

    @property
    def hbm_bandwidth_fraction(self) -> float:
        """HBM bytes (read and written) per second of kernel time, as a fraction of the profile's bandwidth."""
        moved = self.bytes["hbm_read"] + self.bytes["hbm_write"]
        if not self.hbm_peak_bytes_per_s or self.kernel_time_s <= 0:
            return 0.0
        return moved / self.kernel_time_s / self.hbm_peak_bytes_per_s

    def as_dict(self) -> dict:
        return {
            "algo": self.algo,
            "hw": self.hw,
            "hw_provenance": self.hw_provenance,
            "problem": self.problem.as_dict(),
            "tiling": self.tiling.as_dict(),
            "time_s": self.time_s,
            "kernel_time_s": self.kernel_time_s,
            "cycles": self.cycles,
            "tflops": self.tflops,
            "bytes": self.bytes,
            "utilization": self.utilization,
            "bound_by": self.bound_by,
            "hbm_bandwidth_fraction": self.hbm_bandwidth_fraction,
            **({"padding": self.padding} if self.padding else {}),
            **({"options": self.options} if self.options else {}),
            "roofline_time_s": self.roofline_time_s,
            "roofline": self.roofline,
            "kernels": self.kernels,
            "sim": self.sim,
            "pass": self.pass_,
        }


def issue_model_for(rec, profile, tiling=None):
    """The profile with the elementwise timing its issue_model picks for this schedule: 2 the
    instruction-issue model where the schedule's tensor instruction is mma.sync, or where its tiling runs
    cuDNN's loop (pipeline "serial"), whose code issues the softmax's rows interleaved, at 2.5-2.8 cycles an
    instruction (experiments/results/h200/session52/); the dependent stream where it is wgmma in FA3's loop,
    as our v3's code runs it (3.9-4.4 cycles an instruction there; docs/MODEL.md, Instruction issue); 0 and 1
    the one or the other everywhere."""
    if profile.issue_model != 2:
        return profile
    serial = tiling is not None and tiling.pipeline == "serial"
    return profile.with_overrides({"issue_model": int(rec.mma == "mma_sync" or serial)})


def schedule_options(profile, rec=None) -> dict:
    """Build options the profile's model options call for (a record ignores those it does not take): the
    kernels' code stretches for the streamed instruction fetch (fetch_model 1), their bookkeeping
    instructions for the instruction-issue model (issue_model 1 or 2) and for the fetch at the warps' front
    (fetch_model 2, which hides a stretch's lines under them: mma.sync kernels only, since the wgmma kernels
    name no lines), the warp-specialised producers' set-up (block_setup_model 1). A profile without those
    models builds none, and its runs keep their ops (and speed). `profile` is the record's own
    (issue_model_for)."""
    front = profile.fetch_model == 2 and (rec is None or rec.mma == "mma_sync")
    return {**({"code": True} if profile.fetch_model else {}),
            **({"bookkeeping": True} if profile.issue_model or front else {}),
            **({"setup": True} if profile.block_setup_model else {})}


def roofline(algo: str, problem: Problem, profile) -> dict:
    """Lower bounds on time (s) from each unit alone: useful FLOPs on the tensor cores at the
    instruction's peak, one exponential per visible score on the SFUs, compulsory HBM reads of Q, K, V."""
    instr = catalog.get(algo).mma
    clock, sms = profile.clock_hz(instr), profile.sm_count
    rate = profile.tensor_flops_per_clk_per_sm(instr, gemm_dtype(problem))
    flops = problem.flops(pass_of(algo))
    exps = problem.flops() / (4 * problem.headdim)  # one exp per (visible) score, in either pass
    in_bytes = 2 if problem.dtype == "fp8" else problem.elem_bytes
    q_rows = sum(problem.q_len(b) for b in range(problem.batch))  # a variable-length batch: its real rows
    k_rows = sum(problem.k_len(b) for b in range(problem.batch))
    qkv = problem.headdim * in_bytes * (problem.heads * q_rows + 2 * problem.kv_heads * k_rows)
    return {
        "tensor": flops / (rate * sms * clock),
        "sfu": exps / (profile.mufu_ops_per_clk_per_sm * sms * clock),
        "hbm": qkv / profile.hbm_bandwidth_bytes_per_s,
    }


def simulate(
    algo: str,
    problem: Problem,
    profile,
    tiling: Tiling | None = None,
    *,
    sms: int | None = DEFAULT_SAMPLE_SMS,
    trace: list | None = None,
    extrapolate: bool = True,
    small_whole_chip: bool = True,
    options: dict | None = None,
    max_steps: int | None = MAX_SIMULATED_STEPS,
    max_events: int | None = None,
    progress=None,
    flushed_l2: bool = False,
    start_stagger_cycles: int = 0,
    drift_skip: bool = True,
    fold: bool = False,
) -> SimResult:
    """Replay `algo`'s schedule for `problem` on `profile`.

    sms: SMs simulated (sampling, see simulator/gpu.py); None simulates the whole chip.
    extrapolate: let uniform kernels skip periods of waves (simulator/gpu.py) and long V1 loops be probed.
    small_whole_chip: run grids small enough for it on the whole chip even when `sms` asks for a sample (V1's
    probes turn it off: they take the machine their full loop gets).
    max_steps: refuse runs that would interpret more tile steps (simulator/limits.py; None: no limit).
    max_events: stop with EventLimitReached (a FlashsimError) after scheduling that many events (each V1 probe
    has the limit of its own). progress: called with the fraction of the run's blocks done, as they finish.
    options: the record's build options (V3's ablation switches, v2-bwd's dq); one it does not take is refused.
    flushed_l2: start from the full, partly dirty L2 a flush leaves (Gpu.flushed_l2), not an empty one; bytes
    then holds hbm_write_flush, the part of hbm_write that is the flush's dirty lines written back.
    start_stagger_cycles: the first block of each SM's odd slots starts that much later (the phase experiment,
    experiments/stagger.py; kernels/v2.cu's start_stagger_cycles).
    drift_skip: with extrapolate, let the loop skip leave out stretches of causal and variable-length one-role
    kernels whose roles drift against each other (simulator/loopskip.py, within a tolerance); False: its exact
    premise only.
    fold: run a sample's twin SMs, whose ops all take the same cycles, as one (Gpu.fold; opt-in: where the L2
    evicts, the order in which the plain run's twins touch it within a cycle can decide which lines survive,
    and the fold does not keep that order: experiments/fold_exactness.py); False: each of them."""
    rec = catalog.get(algo)
    options = dict(options or {})
    unknown = sorted(set(options) - set(rec.options))
    if unknown:
        raise FlashsimError(f"{algo} takes no option {', '.join(unknown)}"
                            + (f" (it takes {', '.join(rec.options)})" if rec.options else ""))
    check_features(algo, problem, profile)
    if sms is not None and not 0 < sms <= profile.sm_count:
        raise FlashsimError(f"cannot simulate {sms} SMs: {profile.name} has {profile.sm_count} (--full runs them all)")
    if tiling is not None:
        check_fits(algo, problem, tiling, profile)
    t = tiling or resolve_tiling(algo, problem, profile)
    profile = issue_model_for(rec, profile, t)
    check_memory(algo, problem, t, profile)
    steps = problem.seqlen_k // t.block_n
    probed = extrapolate and rec.probe_outer_steps and not problem.causal and steps >= V1_PROBE_FROM
    check_work(algo, problem, t, profile, sms, max_steps, V1_PROBE_MAX * (V1_PROBE_MAX + 1) // 2 if probed else None)
    if probed:
        result = _outer_steps(algo, problem, profile, t, sms, steps, max_events, options)
        if result is not None:
            return result
    # the schedules that know their kernels' code name its stretches (ir.Code) where a model option uses them
    schedule = build(algo, problem, t, **{**schedule_options(profile, rec), **options})
    wall = time.perf_counter()
    gpu = _machine(profile, problem, schedule, sms, trace, small_whole_chip, rec.kv_outer_loop, fold)
    gpu.kv_head_bytes = 2 * problem.seqlen_k * problem.headdim * problem.elem_bytes
    if flushed_l2:
        gpu.flushed_l2()
    gpu.start_stagger = start_stagger_cycles
    gpu.drift_skip = drift_skip
    if max_events is not None:
        gpu.env.max_events = max_events
    cycles = 0
    kernels = []
    totals = dict.fromkeys(_counters(gpu), 0.0)
    kernel_s = 0.0
    factor_last = 1.0
    sample = getattr(gpu, "head_sample", None)
    for i, kernel in enumerate(schedule.kernels):
        if progress is not None:
            n = len(schedule.kernels)
            gpu.on_block = lambda done, total, i=i, n=n: progress((i + done / total) / n)
        k_cycles, simulated, delta = gpu.run_kernel(kernel, lambda: _counters(gpu), extrapolate)
        clock = _kernel_clock(gpu, k_cycles, delta)
        if sample is not None and sample.time_scale != 1.0:  # the sample's share of the work, not the chip's
            fixed = gpu.launch_fixed_cycles()
            k_cycles = fixed + round((k_cycles - fixed) * sample.time_scale)
        if gpu.block_log is not None and kernel is gpu.replay_kernel:  # the chip's dispatch, replayed
            gpu.replay = chip_cycles(gpu.block_log, kernel.steps, kernel.ctas, profile.sm_count,
                                     blocks_per_sm(kernel, profile))
            if gpu.replay is not None:
                gpu.replay["sample_cycles"] = k_cycles
                k_cycles = gpu.launch_fixed_cycles() + round(gpu.replay["cycles"])
            else:  # too few blocks, or costs that do not fit: the sample's own cycles, reported as such
                gpu.head_sample = replace(gpu.head_sample, replayed=False)
        factor = len(kernel.ctas) / max(1, simulated)  # bytes of the sample -> bytes of the whole grid
        factor_last = factor
        for key in totals:
            # bytes scale from the sample to the chip; busy cycles stay per simulated SM
            totals[key] += delta[key] * (1.0 if key.startswith("busy_") else factor)
        kernel_s += k_cycles / clock
        kernels.append(
            {
                "name": kernel.name,
                "cycles": k_cycles,
                "clock_hz": clock,
                "ctas": len(kernel.ctas),
                "ctas_simulated": simulated,
                "threads": kernel.threads,
                "smem_bytes": kernel.smem_bytes,
            }
        )
        cycles += k_cycles
    # launch_overhead_s is start to start: each kernel's time above already holds its busy overhead
    launch_s = max(0.0, profile.launch_overhead_s - profile.kernel_busy_overhead_s) * len(schedule.kernels)
    time_s = kernel_s + launch_s
    util = _utilization(gpu, cycles, totals)
    busiest = max(util, key=util.get)
    bound = busiest if util[busiest] >= LATENCY_BOUND_BELOW else "latency"
    roof = roofline(algo, problem, profile)
    l2 = gpu.l2
    dirty_end = l2.dirty_bytes * gpu.hbm_weight * gpu.dirty_scale * factor_last
    return SimResult(
        algo=algo,
        hw=profile.name,
        hw_provenance=profile.provenance,
        problem=problem,
        tiling=t,
        cycles=cycles,
        time_s=time_s,
        bytes={
            "hbm_read": round(totals["hbm_read"]),
            "hbm_write": round(totals["hbm_write"]),
            "hbm_write_back_after": round(dirty_end),
            # of hbm_write, the flush's dirty lines that this launch's misses evicted
            **({"hbm_write_flush": round(totals["hbm_write_flush"])} if flushed_l2 else {}),
            "l2_read": round(totals["l2_read"]),
            "l2_write": round(totals["l2_write"]),
            **({"l2_atomic": round(totals["l2_atomic"])} if totals["l2_atomic"] else {}),
            "smem_read": round(totals["smem"] - totals["smem_fill_port"]),
            "smem_write": round(totals["smem_write"]),
        },
        utilization=util,
        bound_by=bound,
        roofline_time_s=max(roof.values()),
        roofline=roof,
        kernels=kernels,
        kernel_time_s=kernel_s,
        pass_=pass_of(algo),
        hbm_peak_bytes_per_s=profile.hbm_bandwidth_bytes_per_s,
        padding=padding_avoided(schedule, algo, problem, t, options),
        options=options,
        sim={
            "wall_s": time.perf_counter() - wall,
            "events": gpu.env.events,
            "ops": gpu.ops,
            "sms_simulated": gpu.n_sms * gpu.fold,
            **({"fold": {"twins": gpu.fold, "sms_run": gpu.n_sms}} if gpu.fold > 1 else {}),
            **({"sample": sample_info(gpu.head_sample, gpu.replay)} if getattr(gpu, "head_sample", None) else {}),
            "blocks_extrapolated": gpu.extrapolated_blocks,
            "periodic_skips": gpu.periodic_skips,
            "carried_skips": gpu.carried_skips,
            "loop_skip": dict(gpu.loop_skips),
            **({"unit_skip": dict(gpu.unit_skips)} if gpu.unit_skips["skips"] else {}),
            "launch_overhead_s": launch_s,
        },
    )


def padding_avoided(schedule, algo: str, problem: Problem, t: Tiling, options: dict | None = None) -> dict:
    """For a variable-length batch: thread blocks of its first kernel, global-memory bytes and FLOPs against
    the same batch padded to its longest sequence (a kernel without cu_seqlens), and the fraction of each
    that packing avoids."""
    if not problem.varlen:
        return {}
    from flashsim.algorithms.counting import count_io  # only here: most runs never count

    padded = problem.padded()
    other = build(algo, padded, t, **(options or {}))
    out = {}
    for key, real, pad in (("blocks", len(schedule.kernels[0].ctas), len(other.kernels[0].ctas)),
                           ("gmem_bytes", count_io(schedule).gmem_bytes, count_io(other).gmem_bytes),
                           ("flops", problem.flops(), padded.flops())):
        out.update({key: real, f"{key}_padded": pad, f"{key}_avoided": 1 - real / pad})
    return out


# V1 runs its outer K/V step Tc times per block. A loop of at least V1_PROBE_FROM steps is simulated with
# 1, 2, 3, ... steps (up to V1_PROBE_MAX, and while the probes cost at most a quarter of the loop) until adding a
# step costs the same twice running; from there every step costs that, so the full loop's time is a line
# through the last two. Where block shares and instruction phases make step costs wander by a hair without
# ever repeating, three step costs within V1_SETTLE_TOL of their mean count as settled too, if each byte
# count's last two step increments agree as closely: the loop's cycles are extended by their mean, its bytes
# by the last step's (a step's bytes settle to exact repeats, while the first steps' write-backs differ),
# and the result carries the spread.
V1_PROBE_FROM = 32
V1_PROBE_MAX = 8
V1_SETTLE_TOL = 0.005


def _settled(runs: list) -> tuple[int, float] | None:
    """(step costs to average, their spread) once the probes (runs of 1, 2, ... steps) have settled, else
    None: the last two step costs equal (exact), or the last three within V1_SETTLE_TOL of their mean with
    every byte count's last two increments as close."""
    cycles = [r.cycles for r in runs]
    steps = [cycles[i + 1] - cycles[i] for i in range(len(cycles) - 1)]
    if len(steps) >= 2 and steps[-1] == steps[-2]:
        return 1, 0.0
    if len(steps) < 3:
        return None
    last = steps[-3:]
    mean = sum(last) / 3
    spread = (max(last) - min(last)) / mean if mean > 0 else math.inf
    x, y, z = (r.bytes for r in runs[-3:])
    if spread <= V1_SETTLE_TOL and all(math.isclose(z[k] - y[k], y[k] - x[k], rel_tol=V1_SETTLE_TOL) for k in z):
        return 3, spread
    return None


def _outer_steps(algo: str, problem: Problem, profile, t: Tiling, sms: int | None, steps: int,
                 max_events: int | None = None, options: dict | None = None) -> SimResult | None:
    """V1 (a record with probe_outer_steps) with `steps` full outer steps (and the same ragged last step, if
    any) from shorter loops whose step costs have settled; None if they do not settle within V1_PROBE_MAX steps."""
    wall = time.perf_counter()
    ragged = problem.seqlen_k - steps * t.block_n

    def loop(n: int) -> Problem:
        return replace(problem, seqlen_k=n * t.block_n + ragged)

    # the short runs take the machine (whole chip or sample) that the full loop gets
    if sms and _whole_chip(build(algo, problem, t, **(options or {})), profile):
        sms = None
    runs = []
    for n in range(1, V1_PROBE_MAX + 1):
        if n * (n + 1) / 2 > steps / 4:
            return None  # probing further would cost more than a quarter of the loop it stands for
        runs.append(simulate(algo, loop(n), profile, t, sms=sms, extrapolate=False, small_whole_chip=False,
                             max_events=max_events, options=options))
        settled = _settled(runs)
        if settled:
            break
    else:
        return None
    k, spread = settled
    a, b = runs[-1 - k], runs[-1]

    def line(x: float, y: float) -> float:
        """The last probe's value plus the mean of its last k step costs for each step it lacks."""
        return y + (y - x) / k * (steps - n)

    before = runs[-2].bytes  # bytes: the last step's increments

    kernel_s = line(a.kernel_time_s, b.kernel_time_s)
    launch_s = b.sim["launch_overhead_s"]
    roof = roofline(algo, problem, profile)
    cycles = round(line(a.cycles, b.cycles))
    return SimResult(
        algo=algo, hw=profile.name, problem=problem, tiling=t, cycles=cycles, time_s=kernel_s + launch_s,
        hw_provenance=profile.provenance,
        bytes={key: round(b.bytes[key] + (b.bytes[key] - before[key]) * (steps - n)) for key in b.bytes},
        utilization=b.utilization, bound_by=b.bound_by,
        roofline_time_s=max(roof.values()), roofline=roof,
        kernels=[{**b.kernels[0], "cycles": cycles}], kernel_time_s=kernel_s,
        hbm_peak_bytes_per_s=profile.hbm_bandwidth_bytes_per_s,
        sim={"wall_s": time.perf_counter() - wall, "events": sum(r.sim["events"] for r in runs),
             "ops": sum(r.sim["ops"] for r in runs),
             "sms_simulated": b.sim["sms_simulated"], "blocks_extrapolated": 0, "launch_overhead_s": launch_s,
             **({"sample": b.sim["sample"]} if "sample" in b.sim else {}),
             "outer_steps_simulated": list(range(1, n + 1)), "outer_steps": steps + bool(ragged),
             "outer_step_spread": spread},
    )


def _machine(profile, problem: Problem, schedule, sms: int | None, trace, small_whole_chip: bool = True,
             kv_outer_loop: bool = False, fold: bool = False) -> Gpu:
    """The whole chip, or a sample of whole K/V heads on the matching share of it (simulator/sampling.py).
    kv_outer_loop: the blocks loop over their Q blocks inside each K/V step (V1), so a block's steps are both.
    fold: run a sample's twin SMs as one (_twins)."""
    groups = problem.batch * problem.kv_heads
    # a variable-length batch runs whole: a sample of its (batch, head) groups would not have its mix of lengths
    if not sms or problem.varlen or small_whole_chip and _whole_chip(schedule, profile):
        return Gpu(profile, None, trace)
    kernel = max(schedule.kernels, key=lambda k: len(k.ctas))
    of = kernel.kv_head_of or (lambda c: (c[0], c[1] // problem.group))
    t = schedule.tiling
    steps = max(1, problem.seqlen_k // t.block_n) if t is not None and getattr(t, "block_n", 0) else 1
    # (grids of few waves keep the tile-op rule above: V1's few long blocks are sampled, as its probes are)
    many_waves = len(kernel.ctas) > SAMPLE_ABOVE_WAVES * profile.sm_count
    # a block's steps (one Q block meeting one K/V block): V1's blocks meet each K/V block with every Q block
    # they own (every splits-th), so its grid of many short-looking blocks is no grid of little work
    block_steps = steps * -(-problem.seqlen_q // (t.block_m * t.splits)) if kv_outer_loop else steps
    work = len(kernel.ctas) * (block_steps / 2 if problem.causal else block_steps)
    if small_whole_chip and many_waves and work <= WHOLE_CHIP_WORK * (1 if problem.causal else LOCKSTEP_WORK_FACTOR):
        return Gpu(profile, None, trace)
    choice = head_sample(groups, profile.sm_count, sms, len(kernel.ctas) // groups, blocks_per_sm(kernel, profile),
                         _section(kernel.ctas, of), steps / 2 if problem.causal else steps, problem.causal)
    if choice.g >= groups:
        return Gpu(profile, None, trace)
    pairs = [(b, h) for b in range(problem.batch) for h in range(problem.kv_heads)]
    chosen = {pairs[(i * groups) // choice.g] for i in range(choice.g)}  # spread over batch, heads and sections
    # causal blocks, of unequal length, drift apart: the chip's SMs do not store in lockstep
    twins = (_twins(problem, schedule, kernel, chosen, choice.n, blocks_per_sm(kernel, profile), trace,
                    kv_outer_loop) if fold else 1)
    gpu = Gpu(profile, choice.n, trace, heads=chosen, group=problem.group, copies=groups / choice.g,
              lockstep=not problem.causal, fold=twins)
    gpu.groups_total = groups
    # blocks of unequal length dealt head after head: the chip's end is replayed from the sample's blocks
    if kernel.steps is not None and not kernel.persistent and not choice.follows_work:
        choice = replace(choice, replayed=True)
        gpu.block_log, gpu.replay_kernel = [], kernel
    gpu.head_sample = choice
    return gpu


def _twins(problem: Problem, schedule, kernel, chosen: set, sms: int, slots: int, trace, kv_outer_loop: bool) -> int:
    """How many of a sample's SMs run as one (Gpu.fold): all of them where they are twins, every op of theirs
    at the same cycles as the others' (experiments/twin_sms.py found such samples), else 1. They are where one
    launch's blocks are equal and start together (uniform, non-causal, each taken afresh) and every wave of the
    sample (`chosen` heads) lies within one head: all its SMs then read the same K/V tiles at the same cycles, each
    its own Q and O (GQA launches list a few blocks of each head in turn, and fold only where a wave holds no
    more). Not V1's (kv_outer_loop): its loops read and write the twins' own tiles, which a loop skip replays for
    one."""
    if trace is not None or problem.causal or problem.varlen or len(schedule.kernels) != 1 or sms < 2:
        return 1
    if not kernel.uniform or kernel.steps is not None or kv_outer_loop:
        return 1
    of = kernel.kv_head_of or (lambda c: (c[0], c[1] // problem.group))
    heads = [of(c) for c in kernel.ctas if of(c) in chosen]  # the sampled blocks' heads, in launch order
    wave = sms * slots
    if len(heads) % wave or any(len(set(heads[i:i + wave])) > 1 for i in range(0, len(heads), wave)):
        return 1  # a wave of the sample holds blocks of two heads (heads interleaved, or cut by the waves)
    return sms


def _section(ctas: list, kv_head_of) -> int:
    """K/V head groups the launch order interleaves: 1 when a head's blocks are consecutive; v3's causal order
    lists a row of every head of a section before the next row (algorithms/tile_order.py)."""
    seen = set()
    for cta in ctas:
        head = kv_head_of(cta)
        if head in seen:
            break
        seen.add(head)
    return max(1, len(seen))


def _whole_chip(schedule, profile, scale: float = 1.0) -> bool:
    """Whether a grid is small enough to run on the whole chip: few waves, and fewer tile ops than
    WHOLE_CHIP_OPS (each kernel's grid times its first block's program, times `scale`)."""
    if max(len(k.ctas) for k in schedule.kernels) > SAMPLE_ABOVE_WAVES * profile.sm_count:
        return False
    ops = sum(len(k.ctas) * sum(sum(1 for _ in role.program(k.ctas[0])) for role in k.roles)
              for k in schedule.kernels)
    return ops * scale <= WHOLE_CHIP_OPS


def _counters(gpu: Gpu) -> dict:
    smem = sum(sm.smem.work for sm in gpu.sms)
    now = gpu.env.now
    sms = gpu.sms
    busy = {  # each unit's busy cycles, summed over the SMs
        "busy_tensor": sum([sm.tensor.busy_cycles(now) for sm in sms]),
        "busy_sfu": sum([sm.sfu.busy_cycles(now) for sm in sms]),
        "busy_alu": sum([sm.alu.busy_cycles(now) for sm in sms]),
        "busy_smem": sum([sm.smem.busy_cycles(now) for sm in sms]),
    }
    busy["busy_tensor"] += sum(sm.wgmma_queue.busy_cycles(now) for sm in gpu.sms)
    out = {
        **busy,
        "busy_l2": gpu.l2_port.busy_cycles(now),
        "busy_l2_atomic": gpu.l2_atomic.busy_cycles(now),
        "busy_hbm": gpu.hbm.busy_cycles(now),
        "hbm_read": gpu.l2.miss_bytes,
        "hbm_write": gpu.hbm_write_bytes,
        "hbm_write_flush": gpu.l2.flush_written_back * gpu.hbm_weight,
        "l2_read": gpu.l2.read_bytes,
        "l2_write": gpu.l2.write_bytes,
        "l2_atomic": gpu.atomic_bytes,
        "smem": smem,
        "smem_write": gpu.smem_write_bytes,
        "smem_fill_port": gpu.smem_fill_port_bytes,
    }
    for key, value in gpu.skipped.items():  # what the loop periods left out would have added
        out[key] += value
    return out


def _kernel_clock(gpu: Gpu, cycles: int, delta: dict) -> float:
    """The clock a kernel ran at. With the profile's clock_model 1 a wgmma kernel's is set by power management
    from its tensor cores' duty (their busy share of its cycles on the simulated SMs, Profile.wgmma_clock_hz);
    the simulation itself ran at the saturated clock, which only sets how many cycles HBM's bytes per second
    take. With 0 (the default) every wgmma kernel runs at the saturated clock."""
    p = gpu.profile
    if not p.clock_model or gpu.clock_hz != p.sm_clock_wgmma_load_hz or cycles <= 0:
        return gpu.clock_hz
    return p.wgmma_clock_hz(delta.get("busy_tensor", 0.0) / (cycles * gpu.n_sms))


def _utilization(gpu: Gpu, cycles: int, totals: dict) -> dict:
    if cycles <= 0:
        return dict.fromkeys(UNIT_NAMES, 0.0)
    out = {name: min(1.0, totals[f"busy_{name}"] / (cycles * gpu.n_sms)) for name in ("tensor", "sfu", "alu", "smem")}
    out["l2"] = min(1.0, totals["busy_l2"] / cycles)
    if totals.get("busy_l2_atomic"):  # only schedules with atomics (the backward's dQ) use the L2's reduce units
        out["l2_atomic"] = min(1.0, totals["busy_l2_atomic"] / cycles)
    out["hbm"] = min(1.0, totals["busy_hbm"] / cycles)
    return out
