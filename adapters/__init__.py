"""What every process shares below app/ and tasks/: settings, logging, and the adapters chosen at start-up
(the event bus, the rate limiter, uvicorn's guarded protocol). Imports nothing of app/, tasks/ or vigil/."""
