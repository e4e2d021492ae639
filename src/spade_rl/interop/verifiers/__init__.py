"""spade-rl in verifiers v1 (the ``verifiers`` extra): SPADE's round as a multi-agent environment with
designer and agent seats that prime-rl's ``hierarchical_grpo`` trains (:mod:`.selfplay`, installed as the
package ``environments/spade_selfplay``), and archived designs as a taskset any verifiers-compatible
trainer can train on (:mod:`.games`, written by ``spade-rl envs export --format verifiers``). Both play
environments only in spade-rl's sandbox; the seats' model calls go through verifiers' clients
(:mod:`.seats`). docs/scaling.md ("On prime-rl") has the commands."""
