"""The one exception type for bad input: the CLI prints its message as one line and exits 2."""


class FlashsimError(ValueError):
    """A problem with what the user asked for (a size, a profile, a tiling), not a bug."""


class ProfileError(FlashsimError):
    """A hardware profile that cannot be found, parsed or validated; the message names file and key."""
