"""The errors engine/ raises. Each message is one sentence a person or a model can act on."""


class SpecError(ValueError):
    """monitor_create arguments the model must fix; str() is the sentence to give it."""


class ContentError(ValueError):
    """The source no longer holds what the monitor reads (selector gone, path gone, not a number…)."""
