"""The designer: the role that writes environments, in one place.

    prompts    the designer's prompts and grounding (corpus document, skill, memory examples)
    phase      the design phase of an iteration: prompts -> designs -> hints -> validation -> archive
    extras     the reference's validation extras as the phase meets them (repair, the LLM validator)
    reward     its reward: regret beyond noise, the named terms (rewards.designer_terms), the gate, the
               delay, and masking, centring and scaling into samples (add_designer_samples)
    gauge      the gaming gauge: won designs a gate refuses on revalidation (paid the validity floor)
    warmup     the designer's warm-up on synthetic designs (synthetic: their generator)

What a design must pass is ``spade_rl.design`` (parsing, the validation battery and its gates); the
iteration that calls the phase, plays and updates is ``spade_rl.loop``.
"""
