"""Hardware profiles: the shipped TOMLs, the loader's validation messages, overrides and derived values."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from flashsim.hw_profiles import (
    FEATURES,
    PARAMS,
    FlashsimError,
    Profile,
    ProfileError,
    list_profiles,
    load_profile,
)
from flashsim.hw_profiles.profile import PACKAGE_DIR, SOURCE_KINDS, provenance_of

ROOT = Path(__file__).resolve().parents[1]
H100_TOML = PACKAGE_DIR / "h100-sxm5-80gb.toml"
A100_TOML = PACKAGE_DIR / "a100-sxm4-80gb.toml"
SHIPPED = sorted(p.stem for p in PACKAGE_DIR.glob("*.toml"))


def variant(
    tmp_path: Path,
    base: Path = H100_TOML,
    *,
    values: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    top: tuple[str, ...] = (),
    params: tuple[str, ...] = (),
    name: str = "custom.toml",
) -> Path:
    """A copy of a shipped TOML with some [params] values replaced or dropped and lines added."""
    values = values or {}
    out = []
    for line in base.read_text().splitlines():
        key = line.split("=", 1)[0].strip()
        if key in drop:
            continue
        if key in values:
            line = f'{key} = {{ value = {values[key]}, source = "assumed: test" }}'
        out.append(line)
        if key == "name":
            out.extend(top)
    out.extend(params)
    path = tmp_path / name
    path.write_text("\n".join(out) + "\n")
    return path


def load_error(path: Path | str, *words: str) -> str:
    """Load must fail with a FlashsimError whose one-line message holds the file name and every word."""
    with pytest.raises(FlashsimError) as info:
        load_profile(str(path))
    message = str(info.value)
    assert "\n" not in message
    for word in (Path(path).name, *words):
        assert word in message, f"{word!r} not in {message!r}"
    return message


# -- shipped profiles ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stem", SHIPPED)
def test_every_shipped_profile_loads(stem: str) -> None:
    p = load_profile(stem)
    assert p.name == stem  # name and file stem agree, so both find it
    assert Path(p.path).name == f"{stem}.toml"
    for spec in PARAMS:
        value = getattr(p, spec.name)
        if spec.feature and not p.has(spec.feature):
            assert value is None
            continue
        assert type(value) is spec.kind, spec.name
        assert p.source(spec.name).split(":")[0] in SOURCE_KINDS
    json.dumps(p.as_dict())


def test_shipped_set() -> None:
    names = {i.name for i in list_profiles()}
    assert {"a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "h100-half-smem", "h100-2x-hbm"} <= names
    what_if = [i.based_on is not None for i in list_profiles()]
    assert what_if == sorted(what_if)  # real GPUs first


@pytest.mark.parametrize(
    "alias, name",
    [
        ("a100", "a100-sxm4-80gb"),
        ("h100", "h100-sxm5-80gb"),
        ("H200", "h200-sxm-141gb"),
        ("half-smem", "h100-half-smem"),
        ("2x-hbm", "h100-2x-hbm"),
        ("2x-mufu", "h100-2x-mufu"),
    ],
)
def test_aliases(alias: str, name: str) -> None:
    assert load_profile(alias).name == name
    assert load_profile(alias) is load_profile(name)  # one cached object per file


def test_headline_numbers() -> None:
    a100, h100, h200 = load_profile("a100"), load_profile("h100"), load_profile("h200")
    assert a100.features == {"mma_sync", "cp_async", "named_barriers"}
    assert h100.features == h200.features == set(FEATURES)
    assert a100.tensor_peak_flops_per_s("bf16") == pytest.approx(312e12, rel=0.01)
    # the H100 runs the H200's measured wgmma rate at its measured clock under load, below the datasheet's
    # 989.4 TFLOP/s at 1830 MHz (the profiles share the GH100 SM's measurements)
    assert h100.tensor_peak_flops_per_s("bf16") == h200.tensor_peak_flops_per_s("bf16")
    assert h100.tensor_peak_flops_per_s("bf16") == pytest.approx(4088 * 132 * 1.583e9)
    assert h100.tensor_peak_flops_per_s("fp8") == pytest.approx(8177 * 132 * 1.583e9)
    assert h200.hbm_bandwidth_bytes_per_s == 4.55e12
    assert h200.source("hbm_bandwidth_bytes_per_s").startswith("measured:")
    assert "2026-11" in h200.source("hbm_bandwidth_bytes_per_s")
    assert h200.smem_per_block_max_bytes == 232448 and h200.l2_bytes == 62914560


def test_provenance_of_every_shipped_profile() -> None:
    assert load_profile("h200").provenance == "calibrated"
    assert load_profile("h100").provenance == "derived"
    assert load_profile("a100").provenance == "datasheet-only"
    assert {load_profile(a).provenance for a in ("half-smem", "2x-hbm", "2x-mufu")} == {"derived"}  # inherited
    for info in list_profiles():
        p = load_profile(info.path)
        assert p.provenance == provenance_of(p.sources.values()) and p.as_dict()["provenance"] == p.provenance


def test_h100_shares_the_h200_sm_measurements_and_keeps_its_memory() -> None:
    h100, h200 = load_profile("h100"), load_profile("h200")
    derived = [k for k in h100.params if h100.source(k).startswith("derived:")]
    sm_level = {"sm_clock_hz", "sm_clock_mma_sync_load_hz", "sm_clock_wgmma_load_hz",
                "mma_sync_bf16_flops_per_clk_per_sm", "wgmma_bf16_flops_per_clk_per_sm", "mufu_ops_per_clk_per_sm",
                "smem_latency_cycles",
                "wgmma_latency_cycles", "tma_latency_cycles"}  # fmt: skip
    assert sm_level <= set(derived)
    for k in derived:
        assert "from the H200 measurement" in h100.source(k)
        if k != "hbm_write_bandwidth_bytes_per_s":  # the H200's ratio applied to the H100's own bandwidth
            assert getattr(h100, k) == getattr(h200, k), k
    assert h100.hbm_bytes == 80 << 30 and h100.l2_bytes == 50 << 20
    assert h100.hbm_bandwidth_bytes_per_s == pytest.approx(0.9 * 3.35e12)
    # what it measures itself was measured on an H100 (the call's memset, run 253), never on its sibling
    measured = [k for k in h100.params if h100.source(k).startswith("measured:")]
    assert measured == ["memset_busy_s"] and "on an H100" in h100.source("memset_busy_s")


def test_declared_provenance_must_match_the_sources(tmp_path: Path) -> None:
    claims = A100_TOML.read_text().replace('provenance = "datasheet-only"', 'provenance = "calibrated"')
    (tmp_path / "claims.toml").write_text(claims)
    load_error(tmp_path / "claims.toml", "provenance", "declared 'calibrated'", "'datasheet-only'")
    (tmp_path / "exact.toml").write_text(claims.replace('provenance = "calibrated"', 'provenance = "exact"'))
    load_error(tmp_path / "exact.toml", "unknown provenance 'exact'", "calibrated, derived, datasheet-only")
    undeclared = A100_TOML.read_text().replace('provenance = "datasheet-only"', "")
    (tmp_path / "undeclared.toml").write_text(undeclared)
    assert load_profile(str(tmp_path / "undeclared.toml")).provenance == "datasheet-only"  # read from the sources


def test_what_ifs_change_only_their_keys() -> None:
    h100 = load_profile("h100")
    for alias, keys in {
        "half-smem": {"smem_per_sm_bytes", "smem_per_block_max_bytes"},
        "2x-hbm": {"hbm_bandwidth_bytes_per_s", "hbm_write_bandwidth_bytes_per_s"},
        "2x-mufu": {"mufu_ops_per_clk_per_sm"},
    }.items():
        p = load_profile(alias)
        assert p.based_on == "h100-sxm5-80gb"
        assert {k for k, v in p.params.items() if h100.params[k] != v} == keys
        assert p.source("sm_count") == h100.source("sm_count")  # inherited with its source
    assert load_profile("half-smem").smem_per_sm_bytes * 2 == h100.smem_per_sm_bytes
    assert load_profile("2x-hbm").hbm_bandwidth_bytes_per_s == 2 * h100.hbm_bandwidth_bytes_per_s
    assert load_profile("2x-hbm").hbm_write_bandwidth_bytes_per_s == pytest.approx(
        2 * h100.hbm_write_bandwidth_bytes_per_s, rel=1e-3)


def test_profile_is_frozen_and_typed() -> None:
    p = load_profile("h100")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.sm_count = 1  # type: ignore[misc]
    assert isinstance(p.features, frozenset)
    assert type(p.sm_count) is int and type(p.sm_clock_hz) is float
    hash(p)


def test_docs_list_every_key() -> None:
    doc = (ROOT / "docs" / "PROFILES.md").read_text()
    for spec in PARAMS:
        assert f"`{spec.name}`" in doc, spec.name
    for flag in FEATURES:
        assert f"`{flag}`" in doc, flag


def test_loading_does_not_import_torch() -> None:
    code = (
        "import sys, hw_profiles, hw_profiles.commands; hw_profiles.load_profile('h200'); print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- paths and what-ifs --------------------------------------------------------------------------------


def test_load_by_path(tmp_path: Path) -> None:
    path = variant(tmp_path, values={"sm_count": "100"})
    p = load_profile(str(path))
    assert p.sm_count == 100 and p.source("sm_count") == "assumed: test"
    assert Path(p.path) == path.resolve()
    assert load_profile(path).sm_count == 100  # a Path works too


def test_user_what_if(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        'name = "mine"\ndescription = "H100 with 96 SMs"\nbased_on = "h100"\n'
        '[params]\nsm_count = { value = 96, source = "assumed: test" }\n'
    )
    p = load_profile(str(path))
    assert p.sm_count == 96 and p.based_on == "h100-sxm5-80gb" and p.arch == "hopper"
    assert p.l2_bytes == load_profile("h100").l2_bytes


def test_what_if_dropping_a_feature_drops_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "no-tma.toml"
    path.write_text(
        'name = "no-tma"\ndescription = "H100 without TMA"\nbased_on = "h100-sxm5-80gb"\n'
        'features = ["mma_sync", "cp_async", "wgmma", "fp8", "setmaxnreg", "named_barriers"]\n'
    )
    p = load_profile(str(path))
    assert not p.has("tma") and p.tma_latency_cycles is None and p.wgmma_latency_cycles == 196


def test_what_if_based_on_relative_path(tmp_path: Path) -> None:
    variant(tmp_path, values={"sm_count": "100"}, name="base.toml")
    (tmp_path / "child.toml").write_text('name = "child"\ndescription = "d"\nbased_on = "base.toml"\n')
    assert load_profile(str(tmp_path / "child.toml")).sm_count == 100


def test_what_if_errors(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('name = "a"\ndescription = "d"\nbased_on = "h900"\n')
    load_error(tmp_path / "a.toml", "based_on", "h900", "h100-sxm5-80gb")
    (tmp_path / "b.toml").write_text('name = "b"\ndescription = "d"\nbased_on = "half-smem"\n')
    load_error(tmp_path / "b.toml", "based_on", "what-if")
    (tmp_path / "c.toml").write_text(
        'name = "c"\ndescription = "d"\nbased_on = "a100"\n[params]\nwgmma_latency_cycles = { value = 1, '
        'source = "assumed: x" }\n'
    )
    load_error(tmp_path / "c.toml", "wgmma_latency_cycles", "requires feature wgmma")


# -- validation errors: each names the file and the key ------------------------------------------------


def test_unknown_param(tmp_path: Path) -> None:
    path = variant(tmp_path, params=('smem_per_sm_kb = { value = 1, source = "assumed: x" }',))
    load_error(path, "smem_per_sm_kb", "unknown parameter")


def test_unknown_top_level_key(tmp_path: Path) -> None:
    load_error(variant(tmp_path, top=('vendor = "nvidia"',)), "vendor", "unknown top-level key")
    load_error(variant(tmp_path, top=("sm_count = 3",)), "sm_count", "[params]")


def test_missing_param(tmp_path: Path) -> None:
    load_error(variant(tmp_path, drop=("hbm_latency_cycles",)), "hbm_latency_cycles", "missing")
    load_error(variant(tmp_path, drop=("wgmma_fp8_flops_per_clk_per_sm",)), "wgmma_fp8_flops_per_clk_per_sm", "wgmma")


def test_missing_metadata(tmp_path: Path) -> None:
    load_error(variant(tmp_path, drop=("arch",)), "arch", "missing")


@pytest.mark.parametrize(
    "key, value, words",
    [
        ("sm_count", '"132"', ("expected an integer", "string")),
        ("sm_count", "true", ("boolean",)),
        ("sm_count", "132.5", ("expected an integer",)),
        ("sm_clock_hz", "[1]", ("expected a number",)),
        ("hbm_bandwidth_bytes_per_s", "inf", ("finite",)),
    ],
)
def test_wrong_type(tmp_path: Path, key: str, value: str, words: tuple[str, ...]) -> None:
    load_error(variant(tmp_path, values={key: value}), key, *words)


def test_integral_float_is_an_int(tmp_path: Path) -> None:
    p = load_profile(str(variant(tmp_path, values={"hbm_bytes": "80e9"})))
    assert p.hbm_bytes == 80_000_000_000 and type(p.hbm_bytes) is int


@pytest.mark.parametrize("key, value", [("sm_count", "0"), ("l2_bandwidth_bytes_per_s", "0.0")])
def test_zero(tmp_path: Path, key: str, value: str) -> None:
    load_error(variant(tmp_path, values={key: value}), key, "must be positive")


def test_negative(tmp_path: Path) -> None:
    load_error(variant(tmp_path, values={"hbm_latency_cycles": "-5"}), "hbm_latency_cycles", "must be positive")
    load_error(variant(tmp_path, values={"smem_reserved_per_block_bytes": "-1"}), "smem_reserved", ">= 0")


def test_zero_reservation_is_allowed(tmp_path: Path) -> None:
    assert load_profile(str(variant(tmp_path, values={"smem_reserved_per_block_bytes": "0"}))).sm_count == 132


@pytest.mark.parametrize(
    "values, key, words",
    [
        ({"smem_per_block_max_bytes": "300000"}, "smem_per_block_max_bytes", ("exceeds smem_per_sm_bytes",)),
        ({"smem_per_block_max_bytes": "233000"}, "smem_per_block_max_bytes", ("smem_reserved_per_block_bytes",)),
        ({"max_warps_per_sm": "48"}, "max_threads_per_sm", ("max_warps_per_sm",)),
        ({"max_threads_per_block": "1000"}, "max_threads_per_block", ("multiple of 32",)),
        ({"max_threads_per_block": "4096"}, "max_threads_per_block", ("exceeds max_threads_per_sm",)),
        ({"l2_line_bytes": "96"}, "l2_line_bytes", ("power of two",)),
        ({"l2_bytes": "1e12"}, "l2_bytes", ("hbm_bytes",)),
        ({"hbm_latency_cycles": "200"}, "l2_hit_latency_cycles", ("hbm",)),
    ],
)
def test_inconsistent(tmp_path: Path, values: dict[str, str], key: str, words: tuple[str, ...]) -> None:
    load_error(variant(tmp_path, values=values), key, *words)


def test_arch_and_compute_capability(tmp_path: Path) -> None:
    load_error(variant(tmp_path, drop=("arch",), top=('arch = "volta"',)), "arch", "volta")
    path = variant(tmp_path, drop=("compute_capability",), top=('compute_capability = "8.0"',))
    load_error(path, "compute_capability", "hopper")


def test_unknown_feature(tmp_path: Path) -> None:
    path = variant(tmp_path, A100_TOML, drop=("features",), top=('features = ["mma_sync", "cp_asynch"]',))
    load_error(path, "features", "cp_asynch", "did you mean 'cp_async'")


def test_feature_tied_key_without_feature(tmp_path: Path) -> None:
    path = variant(tmp_path, A100_TOML, params=('tma_issue_cycles = { value = 8, source = "assumed: x" }',))
    load_error(path, "tma_issue_cycles", "requires feature tma")


def test_malformed_toml(tmp_path: Path) -> None:
    path = variant(tmp_path, params=("sm_count = = 3",))
    load_error(path, "malformed TOML", "line")


@pytest.mark.parametrize(
    "line, words",
    [
        ("sm_count = 132", ("inline table",)),
        ('sm_count = { value = 132, source = "guess: x" }', ("source must read",)),
        ('sm_count = { value = 132, source = "assumed:" }', ("source must read",)),
        ('sm_count = { source = "assumed: x" }', ("missing 'value'",)),
        ('sm_count = { value = 1, source = "assumed: x", unit = "SM" }', ("unexpected field 'unit'",)),
    ],
)
def test_entry_structure(tmp_path: Path, line: str, words: tuple[str, ...]) -> None:
    load_error(variant(tmp_path, drop=("sm_count",), params=(line,)), "sm_count", *words)


def test_unknown_profile_lists_known() -> None:
    with pytest.raises(ProfileError) as info:
        load_profile("h900")
    message = str(info.value)
    assert "'h900'" in message and "h100 (h100-sxm5-80gb)" in message and "a100" in message


def test_missing_file() -> None:
    with pytest.raises(ProfileError, match="no such profile file: nowhere/gpu.toml"):
        load_profile("nowhere/gpu.toml")


def test_direct_construction_validates() -> None:
    h100 = load_profile("h100")
    with pytest.raises(ProfileError, match="smem_per_block_max_bytes"):
        dataclasses.replace(h100, smem_per_sm_bytes=1024)
    with pytest.raises(ProfileError, match="requires feature wgmma"):
        dataclasses.replace(h100, features=frozenset({"mma_sync"}))


# -- overrides -----------------------------------------------------------------------------------------


def test_overrides_parse_to_the_key_type() -> None:
    p = load_profile("h100", ["sm_count=100", "smem_per_sm_bytes=2.5e5", "sm_clock_hz=1.98e9"])
    assert (p.sm_count, p.smem_per_sm_bytes, p.sm_clock_hz) == (100, 250000, 1.98e9)
    assert type(p.smem_per_sm_bytes) is int and type(p.sm_clock_hz) is float
    assert p.source("sm_count") == "override: --set sm_count=100"
    assert load_profile("h100").sm_count == 132  # the cached original is untouched


def test_overrides_as_dict_and_method() -> None:
    p = load_profile("a100", {"hbm_bandwidth_bytes_per_s": "2e12", "sm_count": 54})
    assert p.hbm_bandwidth_bytes_per_s == 2e12 and p.sm_count == 54
    assert load_profile("a100").with_overrides(None) is load_profile("a100")


@pytest.mark.parametrize(
    "override, words",
    [
        ("sm_count=abc", ("--set sm_count=abc", "expects an integer")),
        ("sm_count=1.5", ("expects an integer",)),
        ("sm_clock_hz=fast", ("expects a number",)),
        ("sm_count=0", ("sm_count", "--set sm_count=0", "positive")),
        ("smem_per_block_max_bytes=300000", ("--set smem_per_block_max_bytes=300000", "exceeds")),
        ("smem_per_sm_bytes=1024", ("smem_per_block_max_bytes", "--set smem_per_sm_bytes=1024")),
        ("sm_cnt=3", ("sm_cnt", "did you mean 'sm_count'")),
        ("name=x", ("metadata",)),
        ("sm_count", ("KEY=VALUE",)),
        ("sm_clock_hz=nan", ("finite",)),
    ],
)
def test_bad_overrides(override: str, words: tuple[str, ...]) -> None:
    with pytest.raises(ProfileError) as info:
        load_profile("h100", [override])
    message = str(info.value)
    assert "h100-sxm5-80gb.toml" in message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


def test_feature_overrides() -> None:
    p = load_profile("h100", ["features=-tma"])
    assert not p.has("tma") and p.tma_issue_cycles is None and p.has("wgmma")
    with pytest.raises(ProfileError, match="tma_issue_cycles.*required with feature tma"):
        load_profile("a100", ["features=+tma"])
    p = load_profile("a100", ["features=+tma", "tma_issue_cycles=8", "tma_latency_cycles=100"])
    assert p.has("tma") and p.tma_issue_cycles == 8
    with pytest.raises(ProfileError, match="features=\\+a,-b"):
        load_profile("h100", ["features=+tma,wgmma"])
    with pytest.raises(ProfileError, match="fp8 requires wgmma"):
        load_profile("h100", ["features=-wgmma"])


# -- derived values ------------------------------------------------------------------------------------


def test_hbm_bytes_per_clk() -> None:
    p = load_profile("h100")
    assert p.hbm_bytes_per_clk == pytest.approx(3.015e12 / 1.98e9)


def test_tensor_flops() -> None:
    a100, h100 = load_profile("a100"), load_profile("h100")
    assert a100.tensor_flops_per_clk_per_sm("mma_sync", "bf16") == 2048
    assert a100.tensor_flops_per_clk_per_sm("mma_sync", "fp32") == 1024  # fp32 means tf32
    assert h100.tensor_flops_per_clk_per_sm("wgmma", "fp8") == 8177  # the H200's measurement
    assert h100.tensor_flops_per_clk_per_sm("mma_sync", "fp16") == 2723
    assert h100.best_tensor_instr == "wgmma" and a100.best_tensor_instr == "mma_sync"
    with pytest.raises(ProfileError, match="a100-sxm4-80gb lacks feature wgmma"):
        a100.tensor_flops_per_clk_per_sm("wgmma", "bf16")
    with pytest.raises(ProfileError, match="mma_sync has no fp8"):
        h100.tensor_flops_per_clk_per_sm("mma_sync", "fp8")
    with pytest.raises(ProfileError, match="unknown tensor dtype"):
        h100.tensor_flops_per_clk_per_sm("wgmma", "int4")
    with pytest.raises(ProfileError, match="unknown tensor instruction"):
        h100.tensor_flops_per_clk_per_sm("wmma", "fp16")


def test_has_and_source() -> None:
    a100 = load_profile("a100")
    assert a100.has("cp_async") and not a100.has("tma")
    with pytest.raises(ProfileError, match="unknown feature"):
        a100.has("tensor_cores")
    with pytest.raises(ProfileError, match="requires feature wgmma"):
        a100.source("wgmma_latency_cycles")
    with pytest.raises(ProfileError, match="did you mean 'sm_count'"):
        a100.source("sm_counts")


def test_as_dict() -> None:
    d = json.loads(json.dumps(load_profile("h200").as_dict()))
    assert d["params"]["l2_bytes"] == {
        "value": 62914560,
        "unit": "B",
        "source": load_profile("h200").source("l2_bytes"),
    }
    assert d["features"] == sorted(FEATURES) and d["derived"]["hbm_bytes_per_clk"] > 0


def test_profile_class_exported() -> None:
    assert isinstance(load_profile("h100"), Profile)
