"""Hardware profiles: one TOML per GPU (or what-if), loaded into a validated, frozen Profile."""

from flashsim.errors import FlashsimError, ProfileError

from .loader import ProfileInfo, list_profiles, load_profile
from .profile import FEATURES, PARAM_SPECS, PARAMS, ParamSpec, Profile, unit_of

__all__ = [
    "FEATURES",
    "PARAMS",
    "PARAM_SPECS",
    "FlashsimError",
    "ParamSpec",
    "Profile",
    "ProfileError",
    "ProfileInfo",
    "list_profiles",
    "load_profile",
    "unit_of",
]
