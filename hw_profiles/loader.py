"""Finding and reading profile TOMLs: shipped names and aliases, users' paths, what-ifs with based_on.

A file is checked for structure here (known keys, inline {value, source} tables, source kinds); values and
their consistency are checked by Profile itself. Either check fails with one message naming file and key.
"""

from __future__ import annotations

import functools
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashsim.errors import ProfileError

from .profile import (
    PACKAGE_DIR,
    PARAM_SPECS,
    PARAMS,
    PROVENANCES,
    SOURCE_KINDS,
    Profile,
    _did_you_mean,
    _type_name,
    display_path,
    provenance_of,
)

_META_STR = ("name", "description", "arch", "compute_capability", "provenance", "based_on")
_META_LIST = ("features", "aliases")
_TOP_KEYS = (*_META_STR, *_META_LIST, "params")
# A what-if inherits these from its base unless it sets them; name and description are always its own.
_INHERITED = ("arch", "compute_capability", "features", "provenance")


@dataclass(frozen=True)
class ProfileInfo:
    """A shipped profile as `profiles list` shows it, read without validating the numbers."""

    name: str
    aliases: tuple[str, ...]
    path: str
    description: str
    based_on: str | None

    @property
    def alias(self) -> str:
        return self.aliases[0] if self.aliases else self.name


def list_profiles() -> list[ProfileInfo]:
    """Shipped profiles: real GPUs first, then what-ifs, each group by name."""
    return sorted(_shipped().values(), key=lambda i: (i.based_on is not None, i.name))


def load_profile(
    name_or_path: str | os.PathLike, overrides: Mapping[str, Any] | Iterable[str] | None = None
) -> Profile:
    """A shipped profile by name or alias (case-insensitive), or a TOML file by path, with overrides."""
    profile = _load_file(resolve(name_or_path))
    return profile.with_overrides(overrides) if overrides else profile


def resolve(name_or_path: str | os.PathLike) -> Path:
    text = os.fspath(name_or_path).strip()
    index = _index()
    if text.lower() in index:
        return Path(index[text.lower()])
    path = Path(text).expanduser()
    if path.is_file():
        return path.resolve()
    if path.suffix == ".toml" or os.sep in text or "/" in text:
        raise ProfileError(f"no such profile file: {text}")
    known = ", ".join(f"{i.alias} ({i.name})" if i.aliases else i.name for i in list_profiles())
    raise ProfileError(f"unknown profile {text!r}; known: {known}; or give a path to a .toml file")


@functools.cache
def _shipped() -> dict[str, ProfileInfo]:
    infos = {}
    for path in sorted(PACKAGE_DIR.glob("*.toml")):
        meta, _ = _split(_read_header(path), display_path(path))
        infos[meta["name"]] = ProfileInfo(
            meta["name"], tuple(meta.get("aliases", ())), str(path), meta["description"], meta.get("based_on")
        )
    return infos


@functools.cache
def _index() -> dict[str, str]:
    """Lower-cased name, file stem and alias -> file; a clash between shipped files is a packaging bug."""
    index: dict[str, str] = {}
    for info in _shipped().values():
        for key in {info.name, Path(info.path).stem, *info.aliases}:
            other = index.setdefault(key.lower(), info.path)
            if other != info.path:
                raise ProfileError(f"{display_path(info.path)}: name or alias {key!r} is also used by {other}")
    return index


# Parsed files by (path, mtime, size): profiles are immutable, so repeated loads share one object.
_cache: dict[tuple[str, int, int], Profile] = {}


def _load_file(path: Path) -> Profile:
    try:
        stat = path.stat()
    except OSError as exc:
        raise ProfileError(f"cannot read {display_path(path)}: {exc.strerror}") from None
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _cache:
        _cache[key] = _build(path)
    return _cache[key]


def _build(path: Path) -> Profile:
    origin = display_path(path)
    meta, params = _split(_read_toml(path), origin)
    base_name = meta.pop("based_on", None)
    meta.pop("aliases", None)
    if base_name is not None:
        meta, params, base_name = _merge_base(base_name, path, origin, meta, params)
    for key in ("name", "description", "arch", "compute_capability", "features"):
        if key not in meta:
            raise ProfileError(f"{origin}: {key}: missing (required top-level key)")
    for spec in PARAMS:
        if spec.feature is None and spec.name not in params:
            raise ProfileError(f"{origin}: {spec.name}: missing (required in [params])")
    _check_provenance(meta.get("provenance"), [v["source"] for v in params.values()], origin)
    return Profile(
        **meta,
        **{k: v["value"] for k, v in params.items()},
        path=str(path),
        based_on=base_name,
        sources={k: v["source"] for k, v in params.items()},
    )


def _check_provenance(declared: str | None, sources: list[str], origin: str) -> None:
    """A declared provenance must be what the sources show (a profile marked calibrated measures something)."""
    if declared is None or declared not in PROVENANCES:
        return  # none declared (read from the sources), or an unknown one (Profile names the choices)
    shown = provenance_of(sources)
    if declared != shown:
        raise ProfileError(f"{origin}: provenance: declared {declared!r}, but the sources make it {shown!r} "
                           f"({PROVENANCES[shown]})")  # fmt: skip


def _merge_base(base_name: str, path: Path, origin: str, meta: dict, params: dict) -> tuple[dict, dict, str]:
    """A what-if: the base's metadata and parameters, then the what-if's own on top; and the base's name."""
    base_path = _resolve_base(base_name, path, origin)
    if base_path == path:
        raise ProfileError(f"{origin}: based_on: a profile cannot be based on itself")
    base = _load_file(base_path)  # validated as a profile of its own
    if base.based_on is not None:
        raise ProfileError(
            f"{origin}: based_on: {base_name!r} is itself a what-if (based on {base.based_on}); "
            "base a what-if on a real GPU's profile"
        )
    merged_meta = {k: getattr(base, k) for k in _INHERITED} | meta
    features = set(merged_meta["features"])
    inherited = {
        k: {"value": v, "source": base.sources[k]}
        for k, v in base.params.items()
        if PARAM_SPECS[k].feature is None or PARAM_SPECS[k].feature in features
    }
    return merged_meta, inherited | params, base.name


def _resolve_base(base_name: str, path: Path, origin: str) -> Path:
    """based_on names a shipped profile or alias, or a file relative to the what-if's directory."""
    if base_name.lower() in _index():
        return Path(_index()[base_name.lower()])
    candidate = (path.parent / base_name).expanduser()
    if candidate.is_file():
        return candidate.resolve()
    known = ", ".join(i.name for i in list_profiles() if i.based_on is None)
    raise ProfileError(f"{origin}: based_on: unknown profile {base_name!r}; known: {known}, or a relative path")


def _read_header(path: Path) -> dict[str, Any]:
    """A file's top-level keys (name, aliases, ...) without its tables: they come before the first table's
    header line, so only that part is parsed (the whole file where the cut does not parse)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return _read_toml(path)  # says what is wrong with the file
    head, offset = text, 0
    for line in text.splitlines(keepends=True):
        if line.lstrip().startswith("["):
            head = text[:offset]
            break
        offset += len(line)
    try:
        return tomllib.loads(head)
    except tomllib.TOMLDecodeError:
        return _read_toml(path)


def _read_toml(path: Path) -> dict[str, Any]:
    origin = display_path(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{origin}: malformed TOML: {exc}") from None
    except OSError as exc:
        raise ProfileError(f"cannot read {origin}: {exc.strerror}") from None


def _split(data: dict[str, Any], origin: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Check a file's structure; return its metadata and its {key: {value, source}} parameters."""
    for key in data:
        if key not in _TOP_KEYS:
            hint = " (parameters belong in the [params] table)" if key in PARAM_SPECS else _did_you_mean(key, _TOP_KEYS)
            raise ProfileError(f"{origin}: {key}: unknown top-level key{hint}")
    meta: dict[str, Any] = {}
    for key in _META_STR:
        if key in data:
            if not isinstance(data[key], str):
                raise ProfileError(f"{origin}: {key}: expected a string, got {_type_name(data[key])}")
            meta[key] = data[key]
    for key in _META_LIST:
        if key in data:
            value = data[key]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ProfileError(f"{origin}: {key}: expected a list of strings, got {value!r}")
            meta[key] = value
    params = data.get("params", {})
    if not isinstance(params, dict):
        raise ProfileError(f"{origin}: params: expected a [params] table, got {_type_name(params)}")
    for key, entry in params.items():
        _check_entry(key, entry, origin)
    return meta, params


def _check_entry(key: str, entry: Any, origin: str) -> None:
    if key not in PARAM_SPECS:
        raise ProfileError(f"{origin}: {key}: unknown parameter{_did_you_mean(key, PARAM_SPECS)}")
    if not isinstance(entry, dict):
        raise ProfileError(
            f'{origin}: {key}: expected an inline table {{ value = ..., source = "..." }}, got {entry!r}'
        )
    extra = sorted(set(entry) - {"value", "source"})
    if extra:
        raise ProfileError(f"{origin}: {key}: unexpected field {extra[0]!r} (only value and source)")
    for field_name in ("value", "source"):
        if field_name not in entry:
            raise ProfileError(f"{origin}: {key}: missing {field_name!r} in its inline table")
    source = entry["source"]
    kind, sep, text = source.partition(":") if isinstance(source, str) else ("", "", "")
    if not sep or kind.strip() not in SOURCE_KINDS or not text.strip():
        kinds = ", ".join(f'"{k}: ..."' for k in SOURCE_KINDS)
        raise ProfileError(f"{origin}: {key}: source must read one of {kinds}; got {source!r}")
