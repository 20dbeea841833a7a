"""`flashsim simulate --sdpa flash|cudnn`: what PyTorch's SDPA backend would take for a problem, predicted the way
validation predicts its measurements.

The backend's kernel runs one of the simulator's schedules under the library's own launch rule
(experiments/validate_impls.IMPLS, simulator/sdpa.py): SDPA flash is FA2's kernel (the v2 schedule with FA2's
tiles, its split-KV rule and the exponential PyTorch's build computes); SDPA cuDNN is cuDNN's Hopper kernel (the
v3 schedule on its tiles, at the head dim it is compiled for: a d96 problem runs its d128 kernel). The call's
other GPU work is added after the run (simulator/calls.py: cuDNN's 4-byte memset). tests/test_sdpa_launch.py
holds this to validation's own prediction of the same shape.
"""

from __future__ import annotations

from dataclasses import replace

from flashsim.errors import FlashsimError

BACKENDS = ("flash", "cudnn")
def sdpa_run(backend: str, problem, profile) -> tuple[str, object, dict, dict]:
    """(schedule, problem the kernel runs, tiling dict, what the answer records of the launch) for `backend`."""
    from flashsim.algorithms.tiling import resolve_tiling
    from flashsim.experiments.validate_impls import IMPLS, launch_rule

    from .sdpa import fa2_tiling

    impl = IMPLS[f"sdpa-{backend}"]
    algo = impl.algo
    if problem.dtype not in ("bf16", "fp16"):
        raise FlashsimError(f"SDPA's {backend} backend takes bf16 or fp16, not {problem.dtype}")
    if impl.launch == "cudnn-sm90" and not str(profile.compute_capability).startswith("9."):
        raise FlashsimError(f"the cuDNN kernel modelled is its Hopper one (sm_90); {profile.name} is compute "
                            f"capability {profile.compute_capability}")
    run_problem = problem
    if impl.launch == "fa2":
        tiling = fa2_tiling(problem, profile)
    else:
        tiling, kernel_d = launch_rule(impl, algo, problem.headdim)
        run_problem = replace(problem, headdim=kernel_d)
        tiling = tiling or resolve_tiling(algo, run_problem, profile).as_dict()
    tiling = {**tiling, **({"exp2": impl.exp2} if impl.exp2 else {})}
    launch = {"backend": backend, "schedule": algo, "kernel_headdim": run_problem.headdim,
              "launch_rule": impl.launch}
    if impl.launch == "fa2" and tiling.get("splits", 1) == 1:
        launch.update(fa2_instantiation(problem, tiling["block_m"], tiling["block_n"]))
    return algo, run_problem, tiling, launch


def fa2_instantiation(problem, bm: int, bn: int) -> dict:
    """Which of FA2's two forward kernels the launch runs, why, and (causal) how many of a block's last K/V steps
    run its masking code: what the v2 schedule runs SDPA flash with (algorithms/schedules/forward_code.py)."""
    from flashsim.algorithms.schedules.forward_code import MASKING_STEPS, fa2_even

    even = fa2_even(problem, bm, bn)
    if even:
        why = f"the lengths are multiples of its {bm} x {bn} tiles"
    elif problem.varlen:
        why = "a variable-length batch"
    elif problem.headdim > 128:
        why = "over d128 FA2 compiles only this one"
    else:
        why = f"the lengths are not multiples of its {bm} x {bn} tiles"
    out = {"fa2_kernel": "even" if even else "odd", "fa2_kernel_why": why}
    if problem.causal:
        out["masking_steps"] = MASKING_STEPS["fa2"](bm, bn, even)
    return out


def launch_note(launch: dict) -> str:
    """What the answer says of FA2's kernel, for the command line ('' for other launches)."""
    if "fa2_kernel" not in launch:
        return ""
    kind = "its Is_even_MN kernel" if launch["fa2_kernel"] == "even" else "its odd-length kernel, a binary of its own"
    steps = launch.get("masking_steps")
    return (f"; FA2 runs {kind} ({launch['fa2_kernel_why']})"
            + (f", masking the last {steps} K/V steps of each causal block" if steps else ""))


def with_call_work(result, problem, launch: dict, profile):
    """The kernel's result as the call's: the problem asked, and the call's other GPU work added to its times."""
    from .calls import call_busy_s

    pieces = call_busy_s(launch["launch_rule"], profile)
    extra = sum(pieces.values())
    return replace(result, problem=problem, time_s=result.time_s + extra, kernel_time_s=result.kernel_time_s + extra,
                   sim={**result.sim, "sdpa": {**launch, "call": pieces}})


def sdpa_result(backend: str, problem, profile, **kwargs):
    """The call's result (with_call_work) of SDPA's `backend` on `problem`, named sdpa-BACKEND; kwargs go to
    simulate (sms, extrapolate, max_events)."""
    from flashsim.algorithms.tiling import Tiling

    from .api import simulate

    algo, run_problem, tiling, launch = sdpa_run(backend, problem, profile)
    result = with_call_work(simulate(algo, run_problem, profile, Tiling(**tiling), **kwargs), problem, launch,
                            profile)
    return replace(result, algo=f"sdpa-{backend}")
