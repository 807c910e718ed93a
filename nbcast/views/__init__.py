"""Read models: what people look at across the planes, above all of them.

- :mod:`~nbcast.views.definitions` — definitions as listed, with the scheduler's view
  of each and its newest run;
- :mod:`~nbcast.views.runs` — one run in full: attempts, failures, renditions and
  deliveries; :mod:`~nbcast.views.run_files` its executed notebook and tracebacks;
- :mod:`~nbcast.views.overview` — the status overview; :mod:`~nbcast.views.health`
  the services' heartbeats; :mod:`~nbcast.views.metrics` the counts behind
  ``/nbcast/metrics``.

Each read takes a session and a :class:`~nbcast.access.Caller`, is scoped to the
caller's tenant and writes nothing; the CLI, the API and the pages serve them.
"""

__all__: list[str] = []
