"""`flashsim animate | advise`: a replay of one small run in the browser, and which algorithm to pick."""

from __future__ import annotations

import os
import sys
from typing import Any

from flashsim.algorithms.cli_args import add_problem_args, add_tiling_args, problem_from_args, tiling_from_args
from flashsim.errors import FlashsimError
from flashsim.hw_profiles.commands import add_profile_args, profile_from_args


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "animate",
        help="one self-contained HTML page replaying a small run: tiles moving, online softmax, v3's ring",
        description="Replay the timing interpreter's trace of a small problem on its first SMs as an animated page.",
    )
    p.add_argument("--algo", "-a", choices=("v1", "v2", "v3"), default="v2", help="schedule to draw (default v2)")
    add_problem_args(p, seqlen=512, batch=1, heads=2, headdim=64)
    add_tiling_args(p)
    add_profile_args(p)
    p.add_argument("--sms", type=int, default=2, help="SMs to draw, 1 to 4 (default 2)")
    p.add_argument("--out", default="animate.html", help="page to write (default animate.html)")
    p.set_defaults(func=_cmd_animate)

    from .advise import register_advise

    register_advise(subparsers)


def _cmd_animate(args) -> int:
    from .animate import build_animation, render_page
    from .api import check_features

    profile = profile_from_args(args)
    problem = problem_from_args(args)
    if problem.dtype == "fp8":
        raise FlashsimError("animate draws bf16/fp16/fp32 runs of v1, v2 and v3; fp8 is v3-fp8's")
    check_features(args.algo, problem, profile)
    tiling = tiling_from_args(args, args.algo, problem, profile)
    data = build_animation(args.algo, problem, profile, tiling, args.sms)
    tmp = f"{args.out}.tmp"
    with open(tmp, "w") as f:
        f.write(render_page(data))
    os.replace(tmp, args.out)
    sys.stdout.write(f"wrote {args.out}: {len(data['events'])} intervals on {len(data['tracks'])} tracks, "
                     f"{data['cycles']:,} cycles; open it in a browser\n")
    return 0
