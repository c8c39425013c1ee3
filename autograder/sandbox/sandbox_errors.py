"""How the sandbox layer fails before any student code runs (what student code does inside is the kernel's to say)."""


class SandboxConfigError(ValueError):
    """A sandbox configuration the launcher refuses: the message names the setting and what it takes."""
