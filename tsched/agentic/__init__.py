"""Program-aware scheduling of agent workflows on inference replicas.

One module per concern: :mod:`~tsched.agentic.workload` (``agentic-workload/v1``),
:mod:`~tsched.agentic.engine` (``engine-profile/v1``), :mod:`~tsched.agentic.core` (the
scheduler: pure, clock-injected), :mod:`~tsched.agentic.sim` (discrete-event simulator),
:mod:`~tsched.agentic.study` (sweeps, summaries, plots), :mod:`~tsched.agentic.proxy` (the
OpenAI-compatible proxy) and :mod:`~tsched.agentic.bench` (driving a live service).
"""
