"""The errors engine/ raises. Each message is one sentence a person or a model can act on."""


class SpecError(ValueError):
    """monitor_create arguments the model must fix; str() is the sentence to give it."""


class ContentError(ValueError):
    """The source no longer holds what the monitor reads (selector gone, path gone, not a number…)."""


class FetchError(Exception):
    """A fetch that failed; `message` is one sentence a person/model understands."""

    def __init__(self, message: str, *, unreachable: bool = False):
        super().__init__(message)
        self.message = message
        self.unreachable = unreachable


class BlockedURL(FetchError):
    """An SSRF refusal or an unusable URL; never counts as unreachable."""

    def __init__(self, message: str, *, unreachable: bool = False):
        super().__init__(message, unreachable=False)
