"""Who is asked when: the exchange protocol, its event log, and the tapes a replay consumes.

Nothing about *who* talks *when* depends on θ, so a run's schedule is decided apart from its
learning (docs/architecture.md). Modules, in the order data flows through them:

- :mod:`~dpmarket.schedule.events`: the event log, one immutable typed row per event, streamed to disk
- :mod:`~dpmarket.schedule.sequence`: i_k, the owner of each update, in bounded memory
- :mod:`~dpmarket.schedule.protocol`: one exchange after another (query → private answer or
  refusal → update), logged and measured: the reference semantics
- :mod:`~dpmarket.schedule.roster`: scenario owners ↔ a run's participant slots
- :mod:`~dpmarket.schedule.tape`: the exchange tape and the chunks it is streamed in
- :mod:`~dpmarket.schedule.scheduler`: tapes drawn from the ideal network's clocks, or recorded
  from the engine
- :mod:`~dpmarket.schedule.sim`: the SimPy layer: clocks, availability, channels, the learner agent
"""
