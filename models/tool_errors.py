"""The monitor tool's errors, for the model: what to fix, or a limit the moment has reached."""


class ToolError(ValueError):
    """Something the model can fix or must relay; str() is the sentence for it."""


class LimitReached(ToolError):
    """A guardrail refused the monitor (an armed limit, chaining depth): the call was fine, the moment is not."""
